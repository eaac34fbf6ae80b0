#!/usr/bin/env bash
# Builds the GPU machine's binaries here, so that a time-boxed GPU run spends none of its minutes compiling
# (a build there takes about 50 s of a 15-minute run, again on every fresh machine): dp, the
# test binaries and the two bench tools for Hopper (sm_90), without MPI (the GPU machine has no
# Open MPI to link), packed with the hash of the sources they came from into
# .gpu-kit/prebuilt.tar.gz. There tools/gpu/build.sh uses them when the hash matches the tree
# and they start, and builds from source otherwise. The build folder stays, so a rebuild after an
# edit is incremental.
#   tools/gpu/prebuild.sh        build (incrementally) and pack
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=build-gpu-prebuilt
hash=$(tools/gpu/source_hash.sh)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
[[ -f $dir/CMakeCache.txt ]] ||
  cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDP_MPI=OFF \
    -DDP_PYTHON_PACKAGE=OFF >/dev/null
# The GPU machine's binaries link the image libraries statically: no Python module (position-independent) here.
grep -q '^DP_PYTHON_PACKAGE:BOOL=OFF' "$dir/CMakeCache.txt" || cmake -S . -B "$dir" -DDP_PYTHON_PACKAGE=OFF >/dev/null
grep -q '^DP_CUDA:BOOL=ON' "$dir/CMakeCache.txt" || { echo "prebuild: no CUDA compiler here (DP_CUDA is off)" >&2; exit 1; }
targets=(dp_cli dp_tests dp_gpu_tests comm_bandwidth layer_timing)
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}"
[[ $(tools/gpu/source_hash.sh) == "$hash" ]] || { echo "prebuild: the sources changed during the build; run it again" >&2; exit 1; }
# The host code's instruction set (DP_SIMD): the GPU machine's CPU must have it, or build there.
needs="x86-64"
grep -q -- '-march=x86-64-v3' "$dir/compile_commands.json" && needs="x86-64-v3 (avx2 fma bmi2 f16c movbe)"
files=(dp comm_bandwidth layer_timing tests/dp_tests tests/dp_gpu_tests)
{
  echo "sources $hash"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), nvcc $(grep -o 'release [0-9.]*' <<<"$(nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version)")"
  echo "needs $needs"
  echo "libraries $(ldd "$dir/dp" | awk '/=>/ {print $1}' | grep -E 'cu|nccl|openblas|gfortran|z\.so' | sort | tr '\n' ' ')"
} >"$dir/PREBUILT.txt"
mkdir -p .gpu-kit
tar -C "$dir" -czf .gpu-kit/prebuilt.tar.gz.tmp PREBUILT.txt "${files[@]}"
mv .gpu-kit/prebuilt.tar.gz.tmp .gpu-kit/prebuilt.tar.gz
cat "$dir/PREBUILT.txt"
ls -la .gpu-kit/prebuilt.tar.gz
