#!/usr/bin/python3
"""dp from Python against dp from the command line, and PyTorch beside dp in one process:

1. the step time of one run — the convnet on host:2 — by `dp train` and by `dp_engine.train` (with and
   without its progress bar), each the mean step time after the first ten steps (from --metrics'
   time_s), the median over --repeats interleaved runs; the Python overhead per step is their ratio
   less 1;
2. a PyTorch matrix product's time in one process before `import dp_engine`, after it, and after a dp
   command ran there (dp runs OpenBLAS with one thread while it works and gives the count back).

usage: python_overhead.py DP_BINARY [--repeats 5] [--steps 60]   (PYTHONPATH: build/python)
Prints Markdown rows for tools/bench/RESULTS.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

RUN = ["--model", "convnet", "--devices", "host:2", "--batch", "128", "--generated-size", "7680"]


def step_ms(metrics, skip):
    """The mean step time from step `skip` on: --metrics' time_s is the time since the run started, so
    this counts everything between steps too (the loader's wait, the metrics row, a Python thread)."""
    times = [json.loads(line)["time_s"] for line in open(metrics) if '"step"' in line]
    return (times[-1] - times[skip]) / (len(times) - 1 - skip) * 1000


def cli(dp, steps, folder):
    metrics = os.path.join(folder, "cli.jsonl")
    subprocess.run([dp, "train", *RUN, "--steps", str(steps), "--metrics", metrics], check=True, capture_output=True)
    return metrics


def python(steps, folder, progress):
    metrics = os.path.join(folder, f"py{int(progress)}.jsonl")
    code = ("import dp_engine as dp\n"
            f"dp.train('convnet', devices='host:2', batch=128, generated_size=7680, steps={steps}, "
            f"metrics={metrics!r}, progress={progress})\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return metrics


MATMUL = """
import time, torch
def matmul_ms():
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    best = float("inf")
    for _ in range(15):
        t = time.perf_counter()
        for _ in range(50):
            a @ b
        best = min(best, (time.perf_counter() - t) / 50)
    return best * 1000
matmul_ms()  # warm: the thread pools started
before = matmul_ms()
import dp_engine as dp
threads_before = dp._core.blas_threads()
after_import = matmul_ms()
dp.plan("mlp", devices="meta:2")
dp.train("mlp", devices="host:2", steps=2, generated_size=256)
after_run = matmul_ms()
print(before, after_import, after_run, threads_before, dp._core.blas_threads(), dp._core.blas_core())
"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dp")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    skip = 10
    times = {"cli": [], "python": [], "python, progress=True": []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(a.repeats):
            times["cli"].append(step_ms(cli(a.dp, a.steps, folder), skip))
            times["python"].append(step_ms(python(a.steps, folder, False), skip))
            times["python, progress=True"].append(step_ms(python(a.steps, folder, True), skip))
    base = statistics.median(times["cli"])
    print(f"| run ({' '.join(RUN)} --steps {a.steps}) | step time, ms (median of {a.repeats}) | against dp train |")
    print("|---|---|---|")
    for name, ms in times.items():
        m = statistics.median(ms)
        print(f"| {name} | {m:.3f} (spread {min(ms):.3f}-{max(ms):.3f}) | {m / base:.3f}x |")
    out = subprocess.run([sys.executable, "-c", MATMUL], check=True, capture_output=True, text=True).stdout.split()
    before, after_import, after_run = map(float, out[:3])
    print()
    print("| torch 512x512 matmul, ms (best of 15x50, warmed) | before import dp_engine | after it | after dp ran | "
          "OpenBLAS threads before and after dp ran, OpenBLAS core |")
    print("|---|---|---|---|---|")
    print(f"| | {before:.3f} | {after_import:.3f} ({after_import / before:.2f}x) | {after_run:.3f} "
          f"({after_run / before:.2f}x) | {out[3]}, {out[4]}, {out[5]} |")


if __name__ == "__main__":
    main()
