// The ring all-reduce (engine/comm/ring.hpp) enqueued on each device's comm stream
// (Device::comm_stream) and ordered across devices by events, so that no host thread waits for any
// step of it: step t on a device waits only for its left neighbour's step t − 1. On a GPU the host
// enqueues the whole ring at once (the old way, each device's thread waited for its stream and met
// the others at a barrier after every step: 2(N−1) host waits a bucket); on host devices the comm
// streams' workers run it.
//
// Why the neighbour's previous step is enough. A step reads only the left neighbour's buffer, and
// the piece it reads there was last written by that neighbour's step t − 1 (or is its start, for
// t = 0). The all-gather's step s overwrites a piece that the right neighbour read in its
// reduce-scatter step s; the chain of left-neighbour waits back from one to the other passes
// through that read, so it is ordered too. What comes after the ring (the update, the next
// backward) must wait for a device's own last step and for its right neighbour's, the last reader
// of its buffer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/stream.hpp"

namespace dp {

class Device;

// Sums buffers[d] (`count` floats on devices[d]) over the devices, in place, with the same bits
// everywhere. start[d]: an event on devices[d]'s comm stream after which its buffer holds its
// part. recv[d]: a receive buffer on devices[d] of at least count / N + 1 floats, used only by
// that device's comm stream. `name` labels the steps in a trace. Returns each device's event
// after its last step (start itself when there is one device).
std::vector<Event> enqueue_ring_allreduce(const std::vector<Device*>& devices, const std::vector<float*>& buffers,
                                          int64_t count, const std::vector<float*>& recv, std::vector<Event> start,
                                          const std::string& name);

}  // namespace dp
