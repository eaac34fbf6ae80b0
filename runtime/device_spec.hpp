// The devices of a run (--devices): host:N (simulated), meta:N (shapes only: dp plan), cuda (all GPUs), cuda:0,1 (listed
// GPUs), cuda:0x4 (four logical devices on GPU 0; terms combine: cuda:0x2,1x2), auto (all GPUs,
// else host:2).
#pragma once
#include <string>
#include <vector>

namespace dp {

struct DeviceSpec {
  enum class Kind { Host, Meta, Cuda, Auto };
  Kind kind = Kind::Auto;
  int host_count = 0;            // Host and Meta: the device count
  bool all_gpus = false;         // Cuda: "cuda"
  std::vector<int> cuda_gpus;    // Cuda: physical GPU of each logical device, in order
  std::string text;              // how the devices are described ("host:2", --devices as given)
};

}  // namespace dp
