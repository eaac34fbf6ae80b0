#!/usr/bin/env bash
# On the GPU machine (the device tool, with carry [".gpu-kit"] made by tools/gpu/kit.sh): unpack
# the kit to /tmp/dp-kit, find cuDNN (CUDA's own, or the nvidia-cudnn wheel beside the image's
# PyTorch), configure build-gpu for Hopper (sm_90) and build it with ninja on every core.
# Then `source build-gpu/env.sh` before running dp or the tests there (it sets LD_LIBRARY_PATH).
#   tools/gpu/build.sh                  configure and build
#   tools/gpu/build.sh --configure-only configure (a check of the kit, on any machine)
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ -f .gpu-kit/kit.tar.xz ]] || { echo "no .gpu-kit/kit.tar.xz: run tools/gpu/kit.sh on the CPU machine and carry .gpu-kit" >&2; exit 1; }
kit=/tmp/dp-kit
# Unpacked again only when the kit changed: fresh header times would make ninja rebuild everything.
stamp=$(md5sum <.gpu-kit/kit.tar.xz)
if [[ "$(cat "$kit/.stamp" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$kit" && mkdir -p "$kit" && tar -C "$kit" -xJf .gpu-kit/kit.tar.xz && echo "$stamp" >"$kit/.stamp"
fi
cuda=/usr/local/cuda
flags=()
libs="$kit/lib"
if [[ ! -f "$cuda/include/cudnn.h" ]]; then
  cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [[ -z "$cudnn" || ! -f "$cudnn/include/cudnn.h" ]]; then
    echo "cuDNN not found: neither $cuda/include/cudnn.h nor python3's nvidia.cudnn" >&2
    exit 1
  fi
  so=$(ls "$cudnn"/lib/libcudnn.so.* | head -1)
  ln -sf "$so" "$kit/lib/libcudnn.so"  # the wheel has only the versioned name; find_library wants this one
  flags+=("-DCMAKE_CXX_FLAGS=-I$cudnn/include" "-DCMAKE_CUDA_FLAGS=-I$cudnn/include")
  libs="$libs:$cudnn/lib"
  echo "cuDNN from $cudnn"
fi
# NCCL likewise: CUDA's own, or the nvidia-nccl wheel's (without it dp builds and refuses
# --sync allreduce across GPUs and GPU processes).
includes="$kit/include"
if [[ ! -f "$cuda/include/nccl.h" ]]; then
  nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [[ -n "$nccl" && -f "$nccl/include/nccl.h" ]]; then
    ln -sf "$(ls "$nccl"/lib/libnccl.so.* | head -1)" "$kit/lib/libnccl.so"
    includes="$includes;$nccl/include"
    libs="$libs:$nccl/lib"
    echo "NCCL from $nccl"
  else
    echo "NCCL not found: building without it"
  fi
fi
export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$kit" -DCMAKE_INCLUDE_PATH="$includes" -DCMAKE_LIBRARY_PATH="$kit/lib" -DZLIB_ROOT="$kit" \
  "${flags[@]}"
echo "export LD_LIBRARY_PATH=\"$libs:\${LD_LIBRARY_PATH:-}\"" > build-gpu/env.sh
[[ "${1:-}" == "--configure-only" ]] && exit 0
cmake --build build-gpu -j"$(nproc)"
