// The memory the image decoders hold, bounded as a whole rather than per thread: a large image
// (its pixels and its resize's float planes past kDecodeAloneBytes) decodes only once it has room
// in one budget that every loader thread shares, into buffers it gives back after. Three loader
// threads on three 18000x19000 PNGs hold one such image at a time, not three.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "data/image_decode.hpp"

namespace dp {

// An image whose working set is at most this decodes into its thread's reused buffers, asking no one.
constexpr int64_t kDecodeAloneBytes = int64_t{64} << 20;
// What the large images hold at once: the largest image dp decodes (kMaxImagePixels RGB bytes) and
// the float planes of resizing it.
constexpr int64_t kDecodeBudgetBytes = 3 * kMaxImagePixels + (int64_t{512} << 20);

class DecodeBudget {
 public:
  explicit DecodeBudget(int64_t bytes) : bytes_(bytes) {}
  static DecodeBudget& shared();  // the loaders' (kDecodeBudgetBytes)

  // Room for `bytes` while it lives: waits until the images other threads hold leave enough.
  // `bytes` beyond the whole budget is the caller's to refuse first (fits()).
  class Hold {
   public:
    Hold(DecodeBudget& budget, int64_t bytes);
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    DecodeBudget& budget_;
    int64_t bytes_;
  };
  bool fits(int64_t bytes) const { return bytes <= bytes_; }
  int64_t bytes() const { return bytes_; }
  int64_t in_use() const;
  int64_t peak() const;  // the most ever held at once

 private:
  const int64_t bytes_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  int64_t used_ = 0, peak_ = 0;
};

}  // namespace dp
