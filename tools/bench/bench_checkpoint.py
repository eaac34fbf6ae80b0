"""Checkpoint cost (target: checkpointing every 50 steps costs under 2% of the run's time for
the convnet on host:2), in one invocation: the same run with and without --checkpoint, interleaved.

usage: bench_checkpoint.py [--dp build/dp] [--data ../shared/data/mnist] [--steps 300] [--repeats 3]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from openblas import coretype_env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build/dp")
    ap.add_argument("--data", default="../shared/data/mnist")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    env = coretype_env()
    cmd = [os.path.abspath(a.dp), "train", "--model", "convnet", "--data", a.data, "--devices", "host:2", "--batch",
           "128", "--steps", str(a.steps)]
    plain, with_ck = [], []
    for _ in range(a.repeats):
        for out in (plain, with_ck):
            extra = []
            tmp = tempfile.mkdtemp()
            if out is with_ck:
                extra = ["--checkpoint", tmp + "/ck", "--checkpoint-every", "50"]
            t0 = time.perf_counter()
            subprocess.run(cmd + extra, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out.append(time.perf_counter() - t0)
            shutil.rmtree(tmp)
    p, c = statistics.median(plain), statistics.median(with_ck)
    print(f"command: {' '.join(sys.argv)}; {a.steps} steps, convnet, host:2, batch 128, real MNIST\n")
    print("| run | median wall seconds (whole process) | runs |")
    print("|---|---|---|")
    print(f"| no checkpoints | {p:.2f} | {', '.join(f'{x:.2f}' for x in plain)} |")
    print(f"| --checkpoint-every 50 | {c:.2f} | {', '.join(f'{x:.2f}' for x in with_ck)} |")
    print(f"\noverhead: {100 * (c - p) / p:+.2f}% (target < 2%)")


if __name__ == "__main__":
    main()
