// dp plan --roofline GPU: what the step must take at best on a GPU. Each op counts the arithmetic
// it does and the bytes it must move (kernels/op_cost.hpp) as the plan's meta devices run the step,
// at the plan's shapes and types; each call takes at least the longest of its FLOPs at the GPU's
// peak, its bytes at the memory's bandwidth and its bytes from another device at the link's. A
// device runs its kernels one after another on its compute stream, so its step takes at least the
// sum of their times; the collectives and copies between devices (the calls that move link bytes)
// may run beside them (dp's comm stream), so a device takes at least the longer of the two sums,
// and the step at least its slowest device. A lower bound, not a prediction: launches, the host,
// waits between devices and kernels below their peak all come on top.
#pragma once
#include <array>
#include <set>
#include <string>
#include <vector>

#include "kernels/op_cost.hpp"
#include "runtime/op_costs.hpp"

namespace dp {

// A GPU's peaks: dense (no 2:4 sparsity; NVIDIA's datasheets print the sparse figures, twice these).
struct GpuPeaks {
  std::string name;
  double matrix_16bit = 0;  // FLOP/s: bfloat16/float16 matrix products on the tensor cores
  double fp32 = 0;          // FLOP/s: float32 without tensor cores (dp's default: TF32 off)
  double memory = 0;        // bytes/s: device memory
  double link = 0;          // bytes/s: into one GPU from another (NVLink, one direction)
};

// The GPUs known by name (A100, A100-40GB, H100, H100-PCIe, H200).
const std::vector<GpuPeaks>& known_gpus();
// "H200"; "H200,memory=4.0T" (a known GPU, a peak changed); or every peak given:
// "bf16=989T,fp32=67T,memory=4.8T,link=450G". UsageError naming what is wrong.
GpuPeaks gpu_peaks(const std::string& spec);

enum class Bound { Compute = 0, Memory, Link };
constexpr int kBounds = 3;
const char* bound_name(Bound b);  // "compute", "memory", "link"

// One call's time at roofline and what sets it.
double roofline_seconds(const OpCost& c, const GpuPeaks& gpu, Bound* bound = nullptr);

// The calls of one op in one phase on one device.
struct RooflineRow {
  std::string phase, op;
  int64_t calls = 0;
  double flops = 0, bytes = 0, link_bytes = 0;
  double seconds = 0;                     // the calls' times at roofline, summed
  std::array<double, kBounds> by_bound{};  // of those seconds, the calls each bound sets
  bool matrix = false, half = false;
  Bound bound() const;                    // the bound that sets most of its time
};

struct DeviceRoofline {
  std::vector<RooflineRow> rows;  // by the step's phase order, then the longest first
  double seconds = 0;             // every call one after another
  double kernel_seconds = 0;      // the calls without link bytes (the compute stream's)
  double link_seconds = 0;        // the calls with link bytes (collectives, copies between devices)
  double bound_seconds() const { return kernel_seconds > link_seconds ? kernel_seconds : link_seconds; }
  double flops = 0, bytes = 0, link_bytes = 0;
  std::array<double, kBounds> by_bound{};
  std::set<std::string> uncounted;  // ops that ran without counting what they cost
};

struct Roofline {
  GpuPeaks gpu;
  std::vector<DeviceRoofline> devices;
  double step_seconds = 0;  // the slowest device's bound_seconds()
  int slowest = 0;
};

// The roofline of each device's calls (one step's).
Roofline roofline_of(const std::vector<std::vector<CostedCall>>& calls, const std::vector<std::set<std::string>>& uncounted,
                     const GpuPeaks& gpu);

}  // namespace dp
