#include <algorithm>
#include <sstream>

#include "runtime/cuda/device_query.hpp"
#include "core/setting_name.hpp"

namespace dp {

// Like torch.nn.DataParallel's _check_balance: memory first, then SM count.
std::string imbalance_warning(const std::vector<GpuInfo>& gpus) {
  if (gpus.size() < 2) return "";
  auto check = [&](auto value, const char* what) -> std::string {
    auto [mn, mx] = std::minmax_element(gpus.begin(), gpus.end(),
                                        [&](const GpuInfo& a, const GpuInfo& b) { return value(a) < value(b); });
    if (static_cast<double>(value(*mn)) / static_cast<double>(value(*mx)) >= 0.75) return "";
    std::ostringstream os;
    os << "warning: there is an imbalance between your GPUs: GPU " << mn->index << " has less than 75% of the "
       << what << " of GPU " << mx->index << "; you may want to leave GPU " << mn->index
       << " out of " + setting("devices");
    return os.str();
  };
  std::string w = check([](const GpuInfo& g) { return g.total_memory; }, "memory");
  return w.empty() ? check([](const GpuInfo& g) { return static_cast<int64_t>(g.sm_count); }, "multiprocessors") : w;
}

}  // namespace dp
