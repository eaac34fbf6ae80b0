// Uploading the next batch while the current step runs (PyTorch's DataLoader(pin_memory=True)
// with .to(device, non_blocking=True) on a side stream): each piece of the batch goes through the
// device's staging memory (page-locked on a GPU) onto the device on its copy stream, beside the
// compute stream, and the step that needs it makes its compute stream wait for the copy's event
// instead of copying itself.
//
// The copies read the caller's memory when the copy stream runs them, so a staged upload holds
// `owner` (whatever keeps that memory alive) until its copies are done. The step after must be
// given the same batch (the same pointers, unchanged) to use it; otherwise it is dropped (after
// its copies) and that step loads as usual.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/stream.hpp"
#include "runtime/tensor.hpp"

namespace dp {

class UploadAhead {
 public:
  // Which batch a staged upload is of: the host pointers and size, and under --sync allreduce the
  // chunk each device took (a changed split makes a staged one unusable).
  struct Key {
    const void* input = nullptr;
    const int32_t* targets = nullptr;
    int64_t batch = 0;
    std::vector<int64_t> chunks;
    bool operator==(const Key&) const = default;
  };
  struct Piece {
    Tensor dst;       // allocated by the caller on its device
    const void* src;  // dst.bytes() host bytes
  };

  UploadAhead() = default;
  ~UploadAhead();  // waits for copies in flight, then frees the staging memory
  UploadAhead(const UploadAhead&) = delete;
  UploadAhead& operator=(const UploadAhead&) = delete;

  // Enqueue the pieces' copies on their devices' copy streams (what was staged before and not
  // taken is dropped first).
  void stage(Key key, std::vector<Piece> pieces, std::shared_ptr<const void> owner);
  // The staged tensors, in staging order, if they were staged for `key`: each device's compute
  // stream now waits for its copies. Otherwise empty, and what was staged is dropped.
  std::vector<Tensor> take(const Key& key);
  // Forget what is staged, once its copies are done (their errors are not reported: the batch
  // will be loaded again if it is used).
  void drop();
  bool staged() const { return !pieces_.empty(); }
  int64_t staged_count() const { return staged_count_; }  // batches staged so far
  int64_t taken_count() const { return taken_count_; }    // of which used by a step

 private:
  // Host memory a piece is staged in before its upload; grown on the copy stream's thread, the
  // only one that touches it while it exists.
  struct Slot {
    Device* device = nullptr;
    int index = 0;  // the piece's position among its device's pieces
    void* ptr = nullptr;
    size_t size = 0;
    ~Slot();
  };
  Slot& slot(Device& device, int index);  // index: the piece's position among its device's
  void wait_for_copies();

  Key key_;
  std::vector<Piece> pieces_;
  std::vector<std::pair<Device*, Event>> copied_;  // per device with pieces: after its copies
  std::vector<std::unique_ptr<Slot>> slots_;
  int64_t staged_count_ = 0, taken_count_ = 0;
};

}  // namespace dp
