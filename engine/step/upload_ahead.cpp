#include "engine/step/upload_ahead.hpp"

#include <cstring>
#include <map>

#include "core/error.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

UploadAhead::Slot::~Slot() {
  if (ptr) device->staging_memory().release(ptr, size);
}

UploadAhead::~UploadAhead() { wait_for_copies(); }

UploadAhead::Slot& UploadAhead::slot(Device& device, int index) {
  for (auto& s : slots_)
    if (s->device == &device && s->index == index) return *s;
  slots_.push_back(std::make_unique<Slot>());
  slots_.back()->device = &device;
  slots_.back()->index = index;
  return *slots_.back();
}

void UploadAhead::stage(Key key, std::vector<Piece> pieces, std::shared_ptr<const void> owner) {
  drop();
  std::map<Device*, int> count;  // pieces so far per device: which slot a piece takes
  std::vector<Device*> used;
  for (const Piece& piece : pieces) {
    Device& dev = piece.dst.device();
    if (count[&dev]++ == 0) used.push_back(&dev);
    Slot& staging = slot(dev, count[&dev] - 1);
    Stream& copies = dev.copy_stream();
    copies.enqueue(
        [&staging, &dev, dst = piece.dst, src = piece.src, owner] {
          const size_t bytes = dst.bytes();
          if (staging.size < bytes) {  // grow: the previous copy from it is done (see below)
            if (staging.ptr) dev.staging_memory().release(staging.ptr, staging.size);
            staging.ptr = nullptr, staging.size = 0;
            staging.ptr = dev.staging_memory().allocate(bytes);
            if (!staging.ptr)
              throw RuntimeError("upload ahead: cannot allocate " + std::to_string(bytes) +
                                 " bytes of host staging memory for " + dev.name());
            staging.size = bytes;
          }
          std::memcpy(staging.ptr, src, bytes);
          upload(dev.copy_exec(), dst.data<char>(), staging.ptr, bytes);
          // On a GPU the copy is asynchronous: wait for it here, on the copy stream's own thread,
          // so the slot is free for the next batch and the event after this task means "copied".
          if (DeviceQueue* q = dev.copy_stream().device_queue()) q->synchronize();
        },
        copies.label([&] {
          return TaskLabel{"upload ahead host -> " + dev.name() + " " + shape_str(piece.dst.shape()), "copy", -1,
                           static_cast<int64_t>(piece.dst.bytes())};
        }));
  }
  for (Device* dev : used) copied_.emplace_back(dev, dev->copy_stream().record());
  key_ = std::move(key);
  pieces_ = std::move(pieces);
  ++staged_count_;
}

std::vector<Tensor> UploadAhead::take(const Key& key) {
  if (pieces_.empty()) return {};
  if (!(key == key_)) {
    drop();
    return {};
  }
  // A failed copy reaches the step through the event: the compute stream that waits for it stops
  // with UpstreamError, and the step finds the cause on the copy stream.
  for (auto& [dev, copied] : copied_) dev->stream().wait(copied);
  std::vector<Tensor> out;
  for (Piece& p : pieces_) out.push_back(std::move(p.dst));
  pieces_.clear();
  copied_.clear();
  ++taken_count_;
  return out;
}

void UploadAhead::drop() {
  if (pieces_.empty()) return;
  wait_for_copies();
  pieces_.clear();
  copied_.clear();
}

void UploadAhead::wait_for_copies() {
  for (auto& s : slots_) {  // every copy stream this has used (slot 0: once each)
    if (s->index != 0) continue;
    try {
      s->device->copy_stream().synchronize();  // also clears a failed copy's error: the stream stays usable
    } catch (...) {
    }
  }
}

}  // namespace dp
