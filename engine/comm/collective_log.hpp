// The collectives one device ran in a pass, in order, so that a device with no samples can run the
// same ones (ZeRO's shape: every device must join every bucket's reduce-scatter and all-gather,
// even one whose chunk of the batch is empty). The first active device appends as it runs them;
// the others follow, each waiting for the next entry on its own thread.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace dp {

class CollectiveLog {
 public:
  struct Entry {
    bool gather;  // an all-gather of parameters; else a reduce-scatter of gradients
    int bucket;
  };
  // `owner` begins the error a follower raises when the log is aborted ("ZeRO").
  explicit CollectiveLog(std::string owner) : owner_(std::move(owner)) {}
  void reset();             // a new pass
  void append(Entry e);
  void end();               // the pass is over: followers stop after the last entry
  void abort();             // a device failed: followers stop with an UpstreamError
  bool next(size_t i, Entry& e);  // waits for entry i; false after the end

 private:
  std::string owner_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;
  bool ended_ = false, aborted_ = false;
};

}  // namespace dp
