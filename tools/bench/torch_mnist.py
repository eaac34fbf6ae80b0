"""PyTorch CPU baseline for dp-engine's benchmarks: the same model, batch and data, one process.

usage: torch_mnist.py --model convnet --data DIR --batch 128 --threads 2 [--steps N] [--eval] [--init FILE]
Prints one JSON line: samples_per_s (timed after warm-up steps), and test accuracy with --eval.
Set OPENBLAS_CORETYPE before starting Python so OpenBLAS uses its fast kernels, as dp does.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "torch"))
import reference as ref  # noqa: E402
import st_io  # noqa: E402


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 0x803:
        r, c = struct.unpack(">II", raw[8:16])
        return torch.frombuffer(bytearray(raw[16:]), dtype=torch.uint8).reshape(n, r, c)
    return torch.frombuffer(bytearray(raw[8:]), dtype=torch.uint8).long()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="convnet")
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="0: one epoch")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--init", help="initial weights (safetensors with the state dict's names, e.g. a dp --save); "
                    "the seed still draws the order, as without it")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x = ref.normalise(read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")))  # [N, 1, 28, 28]
    y = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"))
    model = ref.make_model(a.model)  # drawn even with --init, so that the order is the seed's either way
    if a.init:
        model.load_state_dict(st_io.load(a.init))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    perm = torch.randperm(len(y))
    steps = a.steps or (len(y) + a.batch - 1) // a.batch
    model.train()
    t0, timed = None, 0
    for s in range(steps):
        if s == a.warmup:
            t0, timed = time.perf_counter(), 0
        idx = perm[(s * a.batch) % len(y):][:a.batch]
        opt.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        timed += len(idx)
    elapsed = time.perf_counter() - t0
    out = {"framework": "pytorch " + torch.__version__, "model": a.model, "batch": a.batch, "threads": a.threads,
           "steps": steps, "samples_per_s": timed / elapsed, "last_loss": loss.item()}
    if a.eval:
        xt = ref.normalise(read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte.gz")))
        yt = read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz"))
        model.eval()
        with torch.no_grad():
            out["test_accuracy"] = (model(xt).argmax(1) == yt).float().mean().item()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
