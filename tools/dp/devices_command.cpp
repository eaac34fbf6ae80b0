#include <cstdio>
#include <thread>

#include "runtime/memory.hpp"
#include "runtime/cuda/device_query.hpp"
#include "tools/dp/commands.hpp"

namespace dp::cli {

Run add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List CUDA GPUs (memory, SMs, peer access) and host devices");
  return [cmd] {
    (void)cmd;
    const CudaDevices cuda = query_cuda_devices();
    if (cuda.gpus.empty()) {
      std::printf("CUDA: no GPU: %s\n  dp runs on host devices instead (--devices auto picks them; --devices host:N "
                  "for N of them)\n", cuda.status.c_str());
    } else {
      std::printf("CUDA: %zu GPU(s), %s\n", cuda.gpus.size(), cuda.status.c_str());
      for (const auto& g : cuda.gpus)
        std::printf("  cuda:%d  %-28s %10s  %3d SMs  compute %d.%d\n", g.index, g.name.c_str(),
                    format_bytes(g.total_memory).c_str(), g.sm_count, g.compute_major, g.compute_minor);
      std::printf("  peer access (row can read column):\n       ");
      for (const auto& g : cuda.gpus) std::printf(" %4d", g.index);
      std::printf("\n");
      for (size_t i = 0; i < cuda.gpus.size(); ++i) {
        std::printf("  %4d ", cuda.gpus[i].index);
        for (size_t j = 0; j < cuda.gpus.size(); ++j)
          std::printf(" %4s", i == j ? "-" : cuda.peer_access[i][j] ? "yes" : "no");
        std::printf("\n");
      }
      const std::string warning = imbalance_warning(cuda.gpus);
      if (!warning.empty()) std::printf("%s\n", warning.c_str());
    }
    std::printf("host: simulated devices on this CPU (%u hardware threads): --devices host:N, N = 1..64\n",
                std::thread::hardware_concurrency());
    return 0;
  };
}

}  // namespace dp::cli
