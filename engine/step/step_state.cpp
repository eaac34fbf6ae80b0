#include "engine/step/step_state.hpp"

namespace dp {

StepState::StepState(int n, int64_t batch_size, int64_t rows, std::vector<int64_t> chunk_sizes)
    : batch(batch_size), loss_rows(rows), chunks(std::move(chunk_sizes)), pixels(n), params(n), buffers(n), grads(n), inputs(n), targets(n),
      outputs(n), grad_outputs(n), scalars(n), step_scalars(n) {
  for (int i = 0; i < n; ++i)
    if (chunks[static_cast<size_t>(i)] > 0) active.push_back(i);
}

Shape StepState::output_shape(int64_t rows) const {
  Shape shape = sample_output_shape;
  shape.insert(shape.begin(), rows);
  return shape;
}

}  // namespace dp
