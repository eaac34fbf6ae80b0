#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<format>/): small valid files of each
kind dp reads, made as the suite's tests make them (PyTorch's exporter for model files, dp's own
run for a checkpoint's state.json, NumPy's format, zlib, Pillow). Run again after a format changes:

    /usr/bin/python3 tests/fuzz/make_corpus.py build/dp
"""
import gzip
import io
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SEP = b"\n--dp-fuzz-next-file--\n"  # fuzz_harness.hpp's kPartSeparator


def put(fmt, name, data):
    d = HERE / "corpus" / fmt
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def safetensors(tensors, metadata=None):
    header, body = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, array) in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + body


def npy(array):
    f = io.BytesIO()
    np.save(f, array)
    return f.getvalue()


def idx(images, labels):
    img = struct.pack(">IIII", 0x803, *images.shape) + images.tobytes()
    lbl = struct.pack(">II", 0x801, len(labels)) + labels.tobytes()
    return img, lbl


def main(dp):
    rng = np.random.default_rng(0)
    # safetensors: weights of the built-in "tiny" (Linear 784-32, ReLU, Linear 32-10), plain and
    # as nn.DataParallel saves them, with dp's metadata.
    tiny = {"1.weight": ("F32", rng.standard_normal((32, 784), dtype=np.float32)),
            "1.bias": ("F32", np.zeros(32, np.float32)),
            "3.weight": ("F32", rng.standard_normal((10, 32), dtype=np.float32)),
            "3.bias": ("F32", np.zeros(10, np.float32))}
    put("safetensors", "tiny.safetensors", safetensors(tiny, {"format": "pt", "producer": "dp-engine"}))
    put("safetensors", "module.safetensors", safetensors({"module." + k: v for k, v in tiny.items()}))

    # tensor files: a safetensors data set (which is also a .npy pair's first part) and a .npy pair.
    images, labels = rng.integers(0, 256, (3, 1, 4, 4), dtype=np.uint8), np.array([0, 1, 2], np.int64)
    put("tensor_files", "uint8.safetensors", safetensors({"images": ("U8", images), "labels": ("I64", labels)}))
    put("tensor_files", "float32.safetensors",
        safetensors({"images": ("F32", rng.standard_normal((2, 3, 2, 2), dtype=np.float32)),
                     "labels": ("I32", np.array([1, 0], np.int32))}))
    put("tensor_files", "pair.npy", npy(images) + SEP + npy(labels))
    put("tensor_files", "pair-f4.npy", npy(rng.standard_normal((2, 2, 2), dtype=np.float32)) + SEP + npy(np.array([3, 1], np.int32)))

    # IDX: raw and gzip pairs.
    img, lbl = idx(rng.integers(0, 256, (3, 4, 4), dtype=np.uint8), np.array([7, 0, 9], np.uint8))
    put("idx", "raw", img + SEP + lbl)
    put("idx", "gzip", gzip.compress(img, mtime=0) + SEP + gzip.compress(lbl, mtime=0))

    # CIFAR-10: records of a label byte and 3x32x32 pixels.
    def records(n):
        return b"".join(bytes([i % 10]) + rng.integers(0, 256, 3072, dtype=np.uint8).tobytes() for i in range(n))
    put("cifar", "two-and-one", records(2) + SEP + records(1))

    # Token files: nanoGPT's raw uint16 ids and llm.c's header (magic 20240520, version 1, count).
    ids = rng.integers(0, 50257, 64, dtype=np.uint16)
    put("tokens", "nanogpt.bin", ids.tobytes())
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, len(ids)]
    put("tokens", "llmc.bin", header.tobytes() + ids.tobytes())

    # Images: JPEG (colour, grayscale) and PNG (RGB, palette, 16-bit grey, with alpha).
    from PIL import Image
    pixels = rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)
    def saved(img, fmt, **kw):
        f = io.BytesIO()
        img.save(f, fmt, **kw)
        return f.getvalue()
    put("image", "rgb.jpg", saved(Image.fromarray(pixels), "JPEG", quality=80))
    put("image", "gray.jpg", saved(Image.fromarray(pixels[:, :, 0]), "JPEG"))
    put("image", "rgb.png", saved(Image.fromarray(pixels), "PNG"))
    put("image", "palette.png", saved(Image.fromarray(pixels).convert("P"), "PNG"))
    put("image", "gray16.png", saved(Image.fromarray(pixels[:, :, 0].astype(np.uint16) * 257), "PNG"))
    put("image", "rgba.png", saved(Image.fromarray(np.dstack([pixels, pixels[:, :, :1]])), "PNG"))

    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        # Model files: small modules through the exporter (a convolutional net with BatchNorm and
        # a residual add, an MLP on tokens' embeddings, nanoGPT's GPT with tied weights).
        (tmp / "nets.py").write_text('''
import torch.nn as nn, torch.nn.functional as F
class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 5)
    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = F.max_pool2d(y + self.conv(x), 2)
        return self.fc(y.flatten(1))
class Words(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.norm = nn.LayerNorm(8)
        self.out = nn.Linear(8, 16)
    def forward(self, x):
        return self.out(F.gelu(self.norm(self.emb(x))))
''')
        export = [sys.executable, str(ROOT / "tools" / "export_model.py")]
        runs = [("conv.json", [f"{tmp}/nets.py:Conv", "--input", "3x8x8"]),
                ("words.json", [f"{tmp}/nets.py:Words", "--input", "tokens:6"]),
                ("nanogpt.json", [str(ROOT / "tests" / "torch" / "nanogpt_model.py") + ":make", "--kwargs",
                                  json.dumps({"block_size": 8, "vocab_size": 32, "n_layer": 1, "n_head": 2,
                                              "n_embd": 8, "dropout": 0.0, "bias": True}),
                                  "--input", "tokens:8"])]
        for name, args in runs:
            subprocess.run(export + args + ["--out", str(tmp / name)], check=True)
            put("model_file", name, (tmp / name).read_bytes())
        # A checkpoint's state.json: dp's own, from one step of the built-in "tiny" with SGD's momentum.
        subprocess.run([dp, "train", "--model", "tiny", "--steps", "1", "--batch", "8", "--generated-size", "64",
                        "--checkpoint", str(tmp / "ckpt")], check=True,
                       stdout=subprocess.DEVNULL)
        states = sorted((tmp / "ckpt").glob("step-*/state.json"))
        put("checkpoint_state", "tiny-sgd.json", states[-1].read_bytes())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
