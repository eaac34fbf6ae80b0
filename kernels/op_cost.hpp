// What each op must cost, as the op declares it: the arithmetic it does and the bytes it must
// move through device memory (every operand read once, every result written once, at the
// operands' own types), so a roofline can say what the op takes at best on a GPU (plan/roofline).
//
// An op counts itself with an OpCounter (Operands holds one: its in/out/inout operands are the
// op's bytes) and names its FLOPs; when its Exec carries an OpCostLog (`costs`), the count goes
// there as the op ends, on every backend: a meta device runs no kernel but counts the same ops
// at the same shapes. An op dispatched on a meta device outside any counter is reported to the
// log as uncounted (DP_DISPATCH), so an op added without its cost cannot go unnoticed.
#pragma once
#include <cstdint>

#include "kernels/buffer.hpp"

namespace dp {

struct Exec;

struct OpCost {
  const char* op = "";
  double flops = 0;       // arithmetic operations (a multiply-add counts 2)
  double bytes = 0;       // device memory read plus written, each operand once
  double link_bytes = 0;  // bytes copied in from another device
  bool matrix = false;    // a matrix product: tensor cores when its operands are 16-bit
  bool half = false;      // every float operand is 16-bit (bfloat16 or float16)
};

class OpCostLog {
 public:
  virtual ~OpCostLog() = default;
  virtual void add(const OpCost& cost) = 0;
  // An op that ran without saying what it costs (a kernels/ops wrapper missing its OpCounter).
  virtual void uncounted(const char* op) = 0;
  // A log that times the ops (dp train --op-times, runtime/op_times.hpp) hears when each outermost
  // counted op starts and ends, on the thread that runs it and with the Exec it runs on; the op's
  // add() follows its end. An op counted inside another is timed as part of it. op_ended runs in a
  // destructor, maybe while the op's own error unwinds: it must not throw.
  virtual void op_started(const Exec& /*ex*/) {}
  virtual void op_ended(const Exec& /*ex*/) noexcept {}
};

// Counts one op call; records it into ex.costs when it goes out of scope (nothing without a log).
class OpCounter {
 public:
  OpCounter(const Exec& ex, const char* op);
  ~OpCounter();
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;

  // The operand b's n elements read (write: written; both for an operand updated in place).
  void reads(Buf b, int64_t n) { operand(b, n, 1); }
  void writes(Buf b, int64_t n) { operand(b, n, 1); }
  void updates(Buf b, int64_t n) { operand(b, n, 2); }
  void bytes(double n) { cost_.bytes += n; }  // raw memory the op touches (copies, fills)
  void link_bytes(double n) { cost_.link_bytes += n; }
  void flops(double n, bool matrix = false) {
    cost_.flops += n;
    cost_.matrix = cost_.matrix || matrix;
  }
  // Whether a counter is open on this thread: an op dispatched inside one is counted.
  static bool open_on_this_thread();

 private:
  void operand(Buf b, int64_t n, int times);
  const Exec& ex_;
  OpCostLog* log_;
  bool timed_ = false;  // the outermost counter on its thread: its log hears it start and end
  OpCost cost_;
  bool any_float_ = false, all_half_ = true;
};

// Ops run on this thread while one lives are not counted: their caller counts them as one (a
// collective's copies and adds, a sum of many buffers done as several adds).
class UncountedOps {
 public:
  UncountedOps();
  ~UncountedOps();
  UncountedOps(const UncountedOps&) = delete;
  UncountedOps& operator=(const UncountedOps&) = delete;
};

// DP_DISPATCH on a meta device: tells the log when no counter is open.
void note_meta_dispatch(const Exec& ex, const char* op);

}  // namespace dp
