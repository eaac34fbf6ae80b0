#include "engine/comm/stream_ring.hpp"

#include "engine/comm/ring.hpp"
#include "runtime/device.hpp"

namespace dp {

std::vector<Event> enqueue_ring_allreduce(const std::vector<Device*>& devices, const std::vector<float*>& buffers,
                                          int64_t count, const std::vector<float*>& recv, std::vector<Event> start,
                                          const std::string& name) {
  const int n = static_cast<int>(devices.size());
  std::vector<Event> prev = std::move(start), now(static_cast<size_t>(n));
  for (int t = 0; t < 2 * (n - 1); ++t) {
    for (int d = 0; d < n; ++d) {
      const int left = (d + n - 1) % n;
      Device &dev = *devices[static_cast<size_t>(d)], &from = *devices[static_cast<size_t>(left)];
      Stream& stream = dev.comm_stream();
      const RingStep step = ring_step(d, n, t);
      stream.wait(prev[static_cast<size_t>(left)]);
      float *mine = buffers[static_cast<size_t>(d)], *in = recv[static_cast<size_t>(d)];
      const float* theirs = buffers[static_cast<size_t>(left)];
      stream.enqueue([step, count, n, mine, theirs, in, &dev, &from] {
        ring_step_on_device(step, count, n, Buf{mine, DType::F32}, theirs, in, dev.comm_exec(), from.comm_exec());
      },
                     stream.label([&] {
                       const auto [b, e] = ring_piece(count, n, step.piece);
                       const int s = step.add ? t : t - (n - 1);
                       return TaskLabel{name + (step.add ? ": reduce-scatter step " : ": all-gather step ") +
                                            std::to_string(s),
                                        "allreduce", Device::kCommTraceTrack + left,
                                        static_cast<int64_t>((e - b) * sizeof(float))};
                     }));
      now[static_cast<size_t>(d)] = stream.record();
    }
    std::swap(prev, now);
  }
  return prev;
}

}  // namespace dp
