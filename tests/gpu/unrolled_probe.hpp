// A test-only launch of unrolled_map (kernels/cuda/unrolled.cuh) on a grid the caller chooses. The
// ops launch blocks_for grids, which cover their data in one pass up to 65535·256·kUnroll elements:
// the later passes run only past that (ResNet-18's activations at batch 256), so a test with a grid
// of a few blocks is how they are checked at a small size.
#pragma once
#include <cstdint>

namespace dp::cuda {
class Context;

// out[i] = a[i] + 2·b[i] + i for every i < n, on `blocks` blocks of kThreads, with 64-bit indices
// or 32-bit ones. out may be a.
void unrolled_probe(Context& c, float* out, const float* a, const float* b, int64_t n, unsigned blocks, bool index64);
}  // namespace dp::cuda
