#include "engine/device.hpp"

#include <cblas.h>

#include <cstdio>

#include "engine/error.hpp"
#include "kernels/cuda/device_query.hpp"

namespace dp {

void configure_host_blas() { openblas_set_num_threads(1); }

Device::Device(int index, std::string name, int64_t capacity, int threads, int device_count)
    : index_(index),
      name_(name),
      received_(static_cast<size_t>(device_count)),
      allocator_(index, name, raw_, capacity),
      pool_(threads),
      kernels_(make_cpu_kernels(pool_)),
      stream_(name) {}

DeviceSet::DeviceSet(const DeviceSpec& spec, const DeviceOptions& options) {
  if (options.threads_per_device < 1 || options.threads_per_device > 256)
    throw UsageError("--threads-per-device must be 1..256");
  int host_count = spec.host_count;
  if (spec.kind != DeviceSpec::Kind::Host) {
    auto gpus = query_cuda_devices();
    if (spec.kind == DeviceSpec::Kind::Cuda) {
      if (gpus.gpus.empty())
        throw RuntimeError("--devices " + spec.text + ": no CUDA GPU is available (" + gpus.status +
                           "); use --devices host:N to simulate devices on the CPU");
      for (int g : spec.cuda_gpus)
        if (g >= static_cast<int>(gpus.gpus.size()))
          throw RuntimeError("--devices " + spec.text + ": GPU " + std::to_string(g) + " does not exist (" +
                             std::to_string(gpus.gpus.size()) + " found)");
      throw RuntimeError("--devices " + spec.text +
                         ": this build's CUDA backend lists devices but cannot train on them yet; "
                         "use --devices host:N");
    }
    // auto: all GPUs once the CUDA step exists; until then host:2, said in one line.
    std::fprintf(stderr, "devices: %s; using 2 simulated host devices (host:2)\n",
                 gpus.gpus.empty() ? ("no CUDA GPU (" + gpus.status + ")").c_str()
                                   : "CUDA training is not in this build yet");
    host_count = 2;
  }
  if (options.capacity.size() > 1 && static_cast<int>(options.capacity.size()) != host_count)
    throw UsageError("device memory: " + std::to_string(options.capacity.size()) + " capacities given for " +
                     std::to_string(host_count) + " devices");
  if (!options.speed.empty() && static_cast<int>(options.speed.size()) != host_count)
    throw UsageError("--device-speed: " + std::to_string(options.speed.size()) + " speeds given for " +
                     std::to_string(host_count) + " devices (one per device)");
  for (double v : options.speed)
    if (!(v > 0.0 && v <= 1.0))
      throw UsageError("--device-speed: each speed must be in (0, 1] (1 = full speed, 0.25 = four times slower)");
  configure_host_blas();
  for (int i = 0; i < host_count; ++i) {
    int64_t cap = options.capacity.empty() ? 0 : options.capacity[options.capacity.size() == 1 ? 0 : i];
    devices_.push_back(
        std::make_unique<Device>(i, "host:" + std::to_string(i), cap, options.threads_per_device, host_count));
    if (!options.speed.empty()) devices_.back()->stream().set_speed(options.speed[i]);
  }
  description_ = "host:" + std::to_string(host_count);
}

std::vector<int64_t> DeviceSet::link_bytes() const {
  const int n = static_cast<int>(devices_.size());
  std::vector<int64_t> out(static_cast<size_t>(n * n));
  for (int src = 0; src < n; ++src)
    for (int dst = 0; dst < n; ++dst) out[static_cast<size_t>(src * n + dst)] = devices_[dst]->received_from(src);
  return out;
}

void DeviceSet::set_tracer(Tracer* tracer) {
  for (auto& d : devices_) d->stream().set_tracer(tracer, d->index());
}

void DeviceSet::synchronize() {
  std::exception_ptr first;
  for (auto& d : devices_) {
    try {
      d->stream().synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace dp
