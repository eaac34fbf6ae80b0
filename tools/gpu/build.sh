#!/usr/bin/env bash
# On the GPU machine (with .gpu-kit beside the tree, made by tools/gpu/kit.sh): unpack
# the kit to /tmp/dp-kit, find cuDNN and NCCL (CUDA's own, or the wheels beside the image's
# PyTorch), and put dp and its tests in build-gpu: the binaries tools/gpu/prebuild.sh packed on the build machine
# when they were built from exactly this tree and start there, else a build from source for
# Hopper (sm_90) with ninja on every core.
# Then `source build-gpu/env.sh` before running dp or the tests there (it sets LD_LIBRARY_PATH).
#   tools/gpu/build.sh                  the prebuilt binaries if they fit, else build
#   tools/gpu/build.sh --from-source    build, even where prebuilt binaries fit
#   tools/gpu/build.sh --configure-only configure (a check of the kit, on any machine)
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-}
[[ -f .gpu-kit/kit.tar.xz ]] || { echo "no .gpu-kit/kit.tar.xz: run tools/gpu/kit.sh on the CPU machine and carry .gpu-kit" >&2; exit 1; }
kit=/tmp/dp-kit
# Unpacked again only when the kit changed: fresh header times would make ninja rebuild everything.
stamp=$(md5sum <.gpu-kit/kit.tar.xz)
if [[ "$(cat "$kit/.stamp" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$kit" && mkdir -p "$kit" && tar -C "$kit" -xJf .gpu-kit/kit.tar.xz && echo "$stamp" >"$kit/.stamp"
fi
cuda=/usr/local/cuda
flags=()
# CUDA's own libraries first: a prebuilt binary's run path names the build machine's folders.
libs="$kit/lib:$cuda/lib64:$cuda/lib"
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
write_env() { echo "export LD_LIBRARY_PATH=\"$libs:\${LD_LIBRARY_PATH:-}\"" >build-gpu/env.sh; }

# The prebuilt binaries, when they fit: the same sources, this CPU runs their host code, every
# library resolves and dp starts. Any miss says why and falls through to the build.
prebuilt_fits() {
  local pack=.gpu-kit/prebuilt.tar.gz info recorded needs
  [[ -f $pack ]] || { echo "no $pack: building here"; return 1; }
  info=$(tar -xzOf "$pack" PREBUILT.txt) || { echo "$pack has no PREBUILT.txt: building here"; return 1; }
  recorded=$(awk '$1 == "sources" {print $2}' <<<"$info")
  [[ $recorded == "$(tools/gpu/source_hash.sh)" ]] ||
    { echo "the prebuilt binaries come from other sources (tools/gpu/prebuild.sh after the last edit): building here"; return 1; }
  needs=$(awk '$1 == "needs" {print $2}' <<<"$info")
  if [[ $needs == x86-64-v3 ]]; then
    local flag
    for flag in avx2 fma bmi2 f16c movbe; do
      grep -qw "$flag" /proc/cpuinfo || { echo "this CPU lacks $flag, which the prebuilt host code uses: building here"; return 1; }
    done
  fi
  rm -rf build-gpu && mkdir -p build-gpu && tar -C build-gpu -xzf "$pack"
  local missing
  missing=$(ldd build-gpu/dp build-gpu/tests/dp_gpu_tests build-gpu/tests/dp_tests | grep 'not found' | sort -u || true)
  [[ -z $missing ]] || { echo "the prebuilt binaries miss libraries: $missing; building here"; rm -rf build-gpu; return 1; }
  build-gpu/dp devices >/dev/null 2>&1 || { echo "the prebuilt dp does not start: building here"; rm -rf build-gpu; return 1; }
  write_env
  echo "prebuilt binaries used: $(grep -E '^(built|needs)' build-gpu/PREBUILT.txt | tr '\n' ';')"
}
if [[ $mode != --from-source && $mode != --configure-only ]] && prebuilt_fits; then exit 0; fi

# A build folder left by prebuilt binaries is replaced, not built over.
[[ -f build-gpu/PREBUILT.txt ]] && rm -rf build-gpu
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDP_PYTHON_PACKAGE=OFF \
  -DCMAKE_PREFIX_PATH="$kit" -DCMAKE_INCLUDE_PATH="$includes" -DCMAKE_LIBRARY_PATH="$kit/lib" -DZLIB_ROOT="$kit" \
  "${flags[@]}"
write_env
[[ $mode == --configure-only ]] && exit 0
cmake --build build-gpu -j"$(nproc)"
echo "built from source"
