// DP_HOST_DEVICE: a function both the CPU kernels and the CUDA kernels call (a shape's index
// arithmetic), compiled for the device under nvcc.
#pragma once

#if defined(__CUDACC__)
#define DP_HOST_DEVICE __host__ __device__
#else
#define DP_HOST_DEVICE
#endif
