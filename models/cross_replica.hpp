// What SyncBatchNorm (--sync-bn) asks of the step: to sum a small vector over every replica of it
// (and every process, under mpirun) from inside its forward and backward. The engine's replica
// group is the one that does it (engine/comm/replica_group.hpp); modules see only this.
#pragma once
#include <vector>

namespace dp {

class CrossReplicaSum {
 public:
  virtual ~CrossReplicaSum() = default;
  // From replica r's stream: data becomes the sum over the step's replicas' data (the same on
  // each). Every replica calls it in the same order. RuntimeError if another replica failed.
  virtual void allreduce_sum(int replica, std::vector<double>& data) = 0;
};

}  // namespace dp
