#include "runtime/device.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "runtime/host/host_memory.hpp"
#include "runtime/meta/meta_memory.hpp"
#include "runtime/cuda/backend.hpp"
#include "runtime/cuda/device_query.hpp"
#include "kernels/ops/memory.hpp"
#include "core/setting_name.hpp"

namespace dp {

namespace {
// --device-memory: none, one for every device, or one per device.
int64_t capacity_of(const DeviceOptions& options, int device, int count) {
  if (options.capacity.size() > 1 && static_cast<int>(options.capacity.size()) != count)
    throw UsageError("device memory: " + std::to_string(options.capacity.size()) + " capacities given for " +
                     std::to_string(count) + " devices");
  if (options.capacity.empty()) return 0;
  return options.capacity[options.capacity.size() == 1 ? 0 : static_cast<size_t>(device)];
}
}  // namespace

void configure_host_blas() { openblas_set_num_threads(1); }

bool poison_allocations() {
  const char* v = std::getenv("DP_POISON_ALLOCATIONS");
  return v && *v && std::string(v) != "0";
}

void Device::poison_if_asked() {
  // Through the compute stream's exec: a GPU's fill is ordered after the block's last user there.
  if (poison_allocations()) allocator_.set_fill_on_allocate([this](void* p, size_t n) { poison(exec_, p, n); });
}

Device::Device(int index, std::string name, int64_t capacity, int threads, int device_count, bool meta)
    : index_(index),
      name_(name),
      received_(static_cast<size_t>(device_count)),
      raw_(meta ? std::unique_ptr<RawMemory>(std::make_unique<MetaRawMemory>(index))
                : std::unique_ptr<RawMemory>(std::make_unique<HostRawMemory>())),
      allocator_(index, name, *raw_, capacity),
      pool_(threads),
      exec_{&pool_, nullptr, &allocator_, meta},
      copy_exec_{&copy_pool_, nullptr, &allocator_, meta},
      comm_exec_{&comm_pool_, nullptr, &allocator_, meta},
      stream_(name) {
  if (!meta) poison_if_asked();
}

Device::Device(int index, std::string name, int64_t capacity, int device_count, int gpu, const cuda::GpuMath& math)
    : index_(index),
      name_(name),
      received_(static_cast<size_t>(device_count)),
      cuda_(make_cuda_device_parts(gpu, math)),
      allocator_(index, name, cuda_->memory(), capacity),
      pool_(1),
      exec_{&pool_, &cuda_->context(), &allocator_},
      copy_exec_{&copy_pool_, &cuda_->copy_context(), &allocator_},
      comm_exec_{&comm_pool_, &cuda_->comm_context(), &allocator_},
      stream_(name) {
  stream_.set_device_queue(&cuda_->queue());
  poison_if_asked();
}

Device::~Device() = default;

Stream& Device::side_stream(std::unique_ptr<Stream>& slot, const char* what, DeviceQueue* queue, int track) {
  if (!slot) {
    auto s = std::make_unique<Stream>(name_ + " " + what);
    if (queue) s->set_device_queue(queue);
    if (tracer_) s->set_tracer(tracer_, track + index_);
    slot = std::move(s);
  }
  return *slot;
}

Stream& Device::copy_stream() {
  return side_stream(copy_stream_, "copy", cuda_ ? &cuda_->copy_queue() : nullptr, kCopyTraceTrack);
}

Stream& Device::comm_stream() { return side_stream(comm_stream_, "comm", comm_queue(), kCommTraceTrack); }

int Device::gpu() const { return cuda_ ? cuda_->gpu() : -1; }

DeviceQueue* Device::comm_queue() { return cuda_ ? &cuda_->comm_queue() : nullptr; }

RawMemory& Device::staging_memory() {
  if (cuda_) return cuda_->pinned_memory();
  if (!staging_) staging_ = std::make_unique<HostRawMemory>();
  return *staging_;
}

void Device::replace_staging_memory(std::unique_ptr<RawMemory> memory) {
  if (cuda_) throw std::logic_error("a CUDA device stages in page-locked memory");
  staging_ = std::move(memory);
}

void Device::set_op_costs(OpCostLog* log) { exec_.costs = copy_exec_.costs = comm_exec_.costs = log; }

DeviceQueue* Device::queue_of(const Exec& ex) {
  if (!cuda_ || !ex.cuda) return nullptr;
  if (ex.cuda == &cuda_->context()) return &cuda_->queue();
  if (ex.cuda == &cuda_->copy_context()) return &cuda_->copy_queue();
  if (ex.cuda == &cuda_->comm_context()) return &cuda_->comm_queue();
  return nullptr;
}

void Device::set_tracer(Tracer* tracer) {
  tracer_ = tracer;
  stream_.set_tracer(tracer, index_);
  if (copy_stream_) copy_stream_->set_tracer(tracer, kCopyTraceTrack + index_);
  if (comm_stream_) comm_stream_->set_tracer(tracer, kCommTraceTrack + index_);
}

DeviceSet::DeviceSet(const DeviceSpec& spec, const DeviceOptions& options) {
  if (options.threads_per_device < 1 || options.threads_per_device > 256)
    throw UsageError(setting("threads-per-device") + " must be 1..256");
  int host_count = spec.host_count;
  const bool meta = spec.kind == DeviceSpec::Kind::Meta;
  if (spec.kind != DeviceSpec::Kind::Host && !meta) {
    auto gpus = query_cuda_devices();
    if (spec.kind == DeviceSpec::Kind::Cuda) {
      if (gpus.gpus.empty())
        throw RuntimeError(setting("devices") + " " + spec.text + ": no CUDA GPU is available (" + gpus.status +
                           "); use " + setting("devices") + " host:N to simulate devices on the CPU");
      for (int g : spec.cuda_gpus)
        if (g >= static_cast<int>(gpus.gpus.size()))
          throw RuntimeError(setting("devices") + " " + spec.text + ": GPU " + std::to_string(g) + " does not exist (" +
                             std::to_string(gpus.gpus.size()) + " found)");
      make_cuda(spec, options, gpus);
      return;
    }
    // auto: every GPU, one logical device each; with none, host:2, said in one line.
    if (!gpus.gpus.empty()) {
      DeviceSpec all = spec;
      all.kind = DeviceSpec::Kind::Cuda;
      all.all_gpus = true;
      all.text = "cuda (auto: " + std::to_string(gpus.gpus.size()) + " GPU" + (gpus.gpus.size() == 1 ? "" : "s") + ")";
      if (options.local_rank >= 0)
        all.text = "cuda (auto: local rank " + std::to_string(options.local_rank) + " of this machine takes GPU " +
                   std::to_string(options.local_rank % static_cast<int>(gpus.gpus.size())) + ")";
      make_cuda(all, options, gpus);
      return;
    }
    std::fprintf(stderr, "devices: no CUDA GPU (%s); using 2 simulated host devices (host:2)\n", gpus.status.c_str());
    host_count = 2;
  }
  capacity_of(options, 0, host_count);  // the count is checked before anything is built
  if (!options.speed.empty() && static_cast<int>(options.speed.size()) != host_count)
    throw UsageError(setting("device-speed") + ": " + std::to_string(options.speed.size()) + " speeds given for " +
                     std::to_string(host_count) + " devices (one per device)");
  // Below 1/1000 a simulated device would take hours a step (and 1e-18 overflows the wait).
  for (double v : options.speed)
    if (!(v >= 1e-3 && v <= 1.0))
      throw UsageError(setting("device-speed") +
                       ": each speed must be in [0.001, 1] (1 = full speed, 0.25 = four times slower)");
  configure_host_blas();
  const std::string kind = meta ? "meta:" : "host:";
  for (int i = 0; i < host_count; ++i) {
    devices_.push_back(std::make_unique<Device>(i, kind + std::to_string(i), capacity_of(options, i, host_count),
                                                options.threads_per_device, host_count, meta));
    if (!options.speed.empty()) devices_.back()->stream().set_speed(options.speed[i]);
  }
  description_ = kind + std::to_string(host_count);
}

std::vector<int64_t> DeviceSet::link_bytes() const {
  const int n = static_cast<int>(devices_.size());
  std::vector<int64_t> out(static_cast<size_t>(n * n));
  for (int src = 0; src < n; ++src)
    for (int dst = 0; dst < n; ++dst) out[static_cast<size_t>(src * n + dst)] = devices_[dst]->received_from(src);
  return out;
}

bool DeviceSet::spans_gpus() const {
  for (const auto& d : devices_)
    if (d->is_cuda() && d->gpu() != devices_.front()->gpu()) return true;
  return false;
}

void DeviceSet::set_tracer(Tracer* tracer) {
  for (auto& d : devices_) d->set_tracer(tracer);
}

void DeviceSet::make_cuda(const DeviceSpec& spec, const DeviceOptions& options, const CudaDevices& found) {
  std::vector<int> gpus = spec.cuda_gpus;
  if (spec.all_gpus && options.local_rank >= 0)  // one process per GPU on this machine
    gpus.push_back(found.gpus[static_cast<size_t>(options.local_rank) % found.gpus.size()].index);
  else if (spec.all_gpus)
    for (const auto& g : found.gpus) gpus.push_back(g.index);
  const int n = static_cast<int>(gpus.size());
  capacity_of(options, 0, n);
  // DataParallel's constructor warning, for the GPUs actually used.
  std::vector<GpuInfo> used;
  for (int g : gpus)
    if (std::none_of(used.begin(), used.end(), [&](const GpuInfo& u) { return u.index == g; }))
      used.push_back(found.gpus[static_cast<size_t>(g)]);
  if (const std::string warning = imbalance_warning(used); !warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
  std::vector<int> distinct;
  for (const auto& u : used) distinct.push_back(u.index);
  enable_peer_access(distinct);
  std::vector<int> copies_on(found.gpus.size(), 0);
  for (int i = 0; i < n; ++i) {
    const int g = gpus[static_cast<size_t>(i)];
    std::string name = "cuda:" + std::to_string(g);  // cuda:0.1 = the second logical device on GPU 0
    if (!spec.all_gpus) {
      name.push_back('.');
      name += std::to_string(copies_on[static_cast<size_t>(g)]++);
    }
    devices_.push_back(std::make_unique<Device>(i, name, capacity_of(options, i, n), n, g, options.gpu_math));
  }
  // Logical devices of one GPU draw on its one memory: out of it, a device empties its siblings'
  // caches before it fails.
  for (auto& d : devices_) {
    std::vector<Device*> siblings;
    for (auto& o : devices_)
      if (o != d && o->gpu() == d->gpu()) siblings.push_back(o.get());
    if (!siblings.empty())
      d->allocator().set_release_others([siblings] {
        for (Device* o : siblings) o->allocator().empty_cache();
      });
  }
  description_ = spec.text;
}

void DeviceSet::synchronize() {
  std::exception_ptr first;
  for (auto& d : devices_) {
    for (Stream* s : {&d->stream(), d->copy_stream_if_made(), d->comm_stream_if_made()}) {
      if (!s) continue;
      try {
        s->synchronize();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace dp
