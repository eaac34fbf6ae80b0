#include "kernels/op_cost.hpp"

#include "kernels/exec.hpp"

namespace dp {

namespace {
thread_local int open_counters = 0;
thread_local int uncounted_scopes = 0;
}

UncountedOps::UncountedOps() { ++uncounted_scopes; }
UncountedOps::~UncountedOps() { --uncounted_scopes; }

OpCounter::OpCounter(const Exec& ex, const char* op) : ex_(ex), log_(ex.costs) {
  cost_.op = op;
  timed_ = log_ && open_counters == 0 && uncounted_scopes == 0;
  if (timed_) log_->op_started(ex_);  // before the count: a throw here leaves nothing open
  ++open_counters;
}

OpCounter::~OpCounter() {
  --open_counters;
  if (timed_) log_->op_ended(ex_);
  if (!log_ || uncounted_scopes > 0) return;
  cost_.half = any_float_ && all_half_;
  log_->add(cost_);
}

bool OpCounter::open_on_this_thread() { return open_counters > 0 || uncounted_scopes > 0; }

void OpCounter::operand(Buf b, int64_t n, int times) {
  if (!b.ptr || n <= 0) return;
  cost_.bytes += static_cast<double>(n) * static_cast<double>(dtype_size(b.dtype)) * times;
  if (b.dtype == DType::F32 || b.dtype == DType::BF16 || b.dtype == DType::F16) {
    any_float_ = true;
    all_half_ = all_half_ && b.dtype != DType::F32;
  }
}

void note_meta_dispatch(const Exec& ex, const char* op) {
  if (ex.costs && !OpCounter::open_on_this_thread()) ex.costs->uncounted(op);
}

}  // namespace dp
