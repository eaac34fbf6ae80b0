// --normalise-on device: batches cross to the devices as uint8 pixels and the device that loads
// them looks each one up in its channel's table (kernels/ops/pixels.hpp), where the loader would
// have made float32 images on the host: a quarter of the bytes to make, stage and upload, the same
// bits. Device 0 holds the float32 batch as it would have (DataParallel's hotspot unchanged), and
// the uint8 one beside it until the step is joined.
#include "engine/comm/comm.hpp"
#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "kernels/ops/pixels.hpp"

namespace dp {

void DataParallel::upload_pixel_table(std::vector<float> table) {
  const int64_t channels = engine_.replicas.model.input_shape[0];  // checked: a table for the model's channels
  engine_.inputs.pixel_table = std::move(table);
  // On each device that loads batches: device 0 (DataParallel's shape), every device (allreduce).
  const int loading = shape_->loads_chunks() ? engine_.replicas.devices.size() : 1;
  engine_.inputs.pixel_tables.assign(static_cast<size_t>(engine_.replicas.devices.size()), Tensor());
  for (int d = 0; d < loading; ++d) {
    engine_.inputs.pixel_tables[static_cast<size_t>(d)] =
        Tensor::empty(engine_.replicas.devices[d], {channels * 256}, MemCategory::Inputs, DType::F32);
    upload_async(engine_.inputs.pixel_tables[static_cast<size_t>(d)], engine_.inputs.pixel_table.data());
  }
  // The copies read engine_.inputs.pixel_table: done before the constructor returns.
  for (int d = 0; d < loading; ++d) engine_.replicas.devices[d].stream().synchronize();
}

StepResult DataParallel::step(const uint8_t* pixels, const int32_t* labels, int64_t batch) {
  return step_any(pixels, DType::U8, labels, batch);
}

void DataParallel::upload_ahead(const uint8_t* pixels, const int32_t* labels, int64_t batch,
                                std::shared_ptr<const void> owner) {
  upload_ahead(MicroBatch::pixels(pixels, labels, batch), std::move(owner));
}

EvalResult DataParallel::evaluate(const uint8_t* pixels, const int32_t* labels, int64_t batch) {
  return evaluate_any(pixels, DType::U8, labels, batch);
}

}  // namespace dp
