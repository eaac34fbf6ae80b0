#!/usr/bin/env bash
# Packs what a build needs from Debian's packages and the GPU machine's image lacks (it has CUDA,
# CMake, ninja and g++, but no apt and no network): the header-only libraries (nlohmann-json,
# CLI11, doctest) with their CMake configs, zlib, and OpenBLAS with its Fortran runtime, into
# .gpu-kit/kit.tar.xz (ignored by git; about 10 MB), MNIST (../shared/data/mnist, or
# DP_MNIST) into .gpu-kit/mnist for verify.py's epoch, and torchvision's resnet50 exported as a
# model file (.gpu-kit/resnet50.json, 3x64x64, 10 classes) for its capabilities stage, and again at
# its native size (.gpu-kit/resnet50-224.json, 3x224x224) for the bench's real sizes; nanoGPT's
# model.py likewise (.gpu-kit/nanogpt.json small, .gpu-kit/nanogpt-gpt2.json at GPT-2 small's
# sizes). Run it on the build machine, then put .gpu-kit beside the tree on the GPU machine
# (tools/gpu/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/include "$stage"/lib "$stage"/lib/cmake "$stage"/share/cmake
cp -r /usr/include/nlohmann /usr/include/CLI /usr/include/doctest "$stage"/include/
cp /usr/include/zlib.h /usr/include/zconf.h "$stage"/include/
cp /usr/include/x86_64-linux-gnu/openblas-pthread/{cblas.h,openblas_config.h} "$stage"/include/
# Each config finds its prefix three folders up, as it did under /usr.
cp -r /usr/lib/cmake/doctest "$stage"/lib/cmake/
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$stage"/share/cmake/
lib=/usr/lib/x86_64-linux-gnu
cp -L "$lib"/openblas-pthread/libopenblas.so.0 "$lib"/libgfortran.so.5 "$lib"/libquadmath.so.0 "$stage"/lib/
cp -L "$lib"/libz.so.1 "$stage"/lib/
ln -s libopenblas.so.0 "$stage"/lib/libopenblas.so
ln -s libz.so.1 "$stage"/lib/libz.so
mkdir -p .gpu-kit
tar -C "$stage" -cJf .gpu-kit/kit.tar.xz .
ls -la .gpu-kit/kit.tar.xz
mnist=${DP_MNIST:-../shared/data/mnist}
if compgen -G "$mnist/*-ubyte.gz" >/dev/null; then
  mkdir -p .gpu-kit/mnist && cp "$mnist"/*-ubyte.gz .gpu-kit/mnist/ && du -sh .gpu-kit/mnist
else
  echo "no MNIST at $mnist (DP_MNIST names another folder): verify.py's equal stage will miss its epoch" >&2
fi
if /usr/bin/python3 -c "import torchvision" 2>/dev/null; then
  /usr/bin/python3 tools/export_model.py torchvision.models:resnet50 --kwargs '{"num_classes": 10}' --input 3x64x64 \
    --out .gpu-kit/resnet50.json
  /usr/bin/python3 tools/export_model.py torchvision.models:resnet50 --kwargs '{"num_classes": 10}' --input 3x224x224 \
    --out .gpu-kit/resnet50-224.json
else
  echo "no torchvision here (apt-get install python3-torchvision): verify.py's capabilities stage will miss its model file" >&2
fi
# nanoGPT's model.py GPT (untied: dp refuses a tied one), at --model gpt's defaults for the capabilities
# stage's one update, and at GPT-2 small's sizes for the bench's real sizes (about a minute: the model
# is built to be traced).
nanogpt=tests/torch/nanogpt_model.py:untied
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  /usr/bin/python3 tools/export_model.py "$nanogpt" --input tokens:128 \
    --kwargs '{"block_size": 128, "vocab_size": 256, "n_layer": 4, "n_head": 4, "n_embd": 256}' --out .gpu-kit/nanogpt.json
  /usr/bin/python3 tools/export_model.py "$nanogpt" --input tokens:1024 \
    --kwargs '{"block_size": 1024, "vocab_size": 50257, "n_layer": 12, "n_head": 12, "n_embd": 768}' \
    --out .gpu-kit/nanogpt-gpt2.json
else
  echo "no PyTorch here (apt-get install python3-torch): the GPU check will miss nanoGPT's model files" >&2
fi
