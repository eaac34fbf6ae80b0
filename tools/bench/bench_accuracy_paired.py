"""dp-engine against PyTorch over a whole epoch, paired: the same initial weights and the same
order of samples on both sides, so that what is left between their test accuracies is the step
itself (and float rounding, which an unstable start magnifies), not the luck of a seed.

usage: bench_accuracy_paired.py [--dp build/dp] [--data ../shared/data/mnist] [--seeds 6]
                                [--devices host:1] [--model convnet]
For seed s: PyTorch's initial weights from torch.manual_seed(s); an order drawn by
torch.randperm with a generator seeded 1000 + s, written as a reordered copy of the training
files, which dp reads with --no-shuffle and PyTorch in file order. One epoch at batch 128, lr 0.05,
momentum 0.9 (bench_vs_torch.py's settings). With host:N, N > 1, PyTorch runs the faithful
DataParallel step of tests/torch/reference.py (each chunk's own BatchNorm statistics), dp its own.
Prints a Markdown table for tools/bench/RESULTS.md: each side's test accuracy, the first step whose
losses differ by more than 1e-3 (relative), and the mean loss of the last 100 steps.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from openblas import machine_line, reexec_with_coretype

reexec_with_coretype()  # PyTorch runs in this process: its OpenBLAS reads the variable when it loads
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "torch"))
import reference as ref  # noqa: E402
import st_io  # noqa: E402
from torch_mnist import read_idx  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "cli"))
from checks import write_idx  # noqa: E402

BATCH, LR, MOMENTUM = 128, 0.05, 0.9


def write_reordered(data, order, out):
    """The training files in `order`, the test files linked as they are."""
    x = read_idx(os.path.join(data, "train-images-idx3-ubyte.gz"))[order]
    y = read_idx(os.path.join(data, "train-labels-idx1-ubyte.gz"))[order]
    write_idx(out, "train", x.numpy().tobytes(), y.tolist(), rows=x.shape[1], level=1)
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        os.symlink(os.path.abspath(os.path.join(data, name)), os.path.join(out, name))


def run_dp(dp, data, model, devices, init, metrics):
    subprocess.run([dp, "train", "--model", model, "--data", data, "--devices", devices, "--batch", str(BATCH),
                    "--lr", str(LR), "--momentum", str(MOMENTUM), "--epochs", "1", "--eval", "--no-shuffle",
                    "--init", init, "--metrics", metrics], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(metrics)]
    return [r["loss"] for r in rows if "loss" in r], [r["test_accuracy"] for r in rows if "test_accuracy" in r][-1]


def run_torch(model, data, devices):
    """One epoch in file order from the model's current weights; per-step losses, test accuracy."""
    n = int(devices.split(":")[1])
    x = ref.normalise(read_idx(os.path.join(data, "train-images-idx3-ubyte.gz")))
    y = read_idx(os.path.join(data, "train-labels-idx1-ubyte.gz"))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    model.train()
    for begin in range(0, len(y), BATCH):
        xb, yb = x[begin:begin + BATCH], y[begin:begin + BATCH]
        losses.append(ref.dp_step(model, opt, xb, yb, ref.chunk_sizes("even", len(yb), n)))
    xt = ref.normalise(read_idx(os.path.join(data, "t10k-images-idx3-ubyte.gz")))
    yt = read_idx(os.path.join(data, "t10k-labels-idx1-ubyte.gz"))
    model.eval()
    with torch.no_grad():
        correct = sum((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item() for i in range(0, len(yt), 1000))
    return losses, correct / len(yt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build/dp")
    ap.add_argument("--data", default="../shared/data/mnist")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--devices", default="host:1")
    ap.add_argument("--model", default="convnet", choices=["convnet", "mlp"])
    ap.add_argument("--threads", type=int, default=2, help="PyTorch's threads")
    a = ap.parse_args()
    dp = os.path.abspath(a.dp)
    torch.set_num_threads(a.threads)
    print(machine_line())
    print(f"| seed | dp {a.devices} accuracy | PyTorch accuracy | dp − PyTorch | losses part at step | "
          "last-100 mean loss dp / PyTorch |")
    print("|---|---|---|---|---|---|")
    dps, torchs = [], []
    y_count = len(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")))
    for s in range(a.seeds):
        work = tempfile.mkdtemp(prefix="dp-paired-")
        try:
            order = torch.randperm(y_count, generator=torch.Generator().manual_seed(1000 + s))
            write_reordered(a.data, order, work)
            torch.manual_seed(s)
            model = ref.make_model(a.model)
            init = os.path.join(work, "init.safetensors")
            st_io.save(model.state_dict(), init)
            dl, dacc = run_dp(dp, work, a.model, a.devices, init, os.path.join(work, "m.jsonl"))
            tl, tacc = run_torch(model, work, a.devices)
        finally:
            shutil.rmtree(work)
        part = next((i + 1 for i, (p, q) in enumerate(zip(dl, tl)) if abs(p - q) > 1e-3 * max(1.0, abs(q))), "never")
        dps.append(dacc)
        torchs.append(tacc)
        print(f"| {s} | {100 * dacc:.2f} | {100 * tacc:.2f} | {100 * (dacc - tacc):+.2f} | {part} | "
              f"{statistics.mean(dl[-100:]):.4f} / {statistics.mean(tl[-100:]):.4f} |", flush=True)
    diffs = [p - q for p, q in zip(dps, torchs)]
    print(f"| mean | {100 * statistics.mean(dps):.2f} | {100 * statistics.mean(torchs):.2f} | "
          f"{100 * statistics.mean(diffs):+.2f} (largest {100 * max(map(abs, diffs)):.2f}) | | |")


if __name__ == "__main__":
    main()
