"""dp-engine against PyTorch CPU on real MNIST, in one invocation (targets: convnet >= 2.0x,
mlp >= 1.5x PyTorch's best of 1 or 2 threads; 1-epoch convnet test accuracy >= 97.5%).

usage: bench_vs_torch.py [--dp build/dp] [--data ../shared/data/mnist] [--repeats 3] [--accuracy-seeds 3]
Prints a Markdown report for tools/bench/RESULTS.md. Both sides use the same OpenBLAS kernels
(OPENBLAS_CORETYPE: SkylakeX with AVX-512, else Haswell) and exclude the first 5 steps from the timing.
The accuracy table compares each side's own seeds: their weights and orders differ, and one epoch's
accuracy moves by about a point with the order alone. bench_accuracy_paired.py gives both sides the
same weights and order, which isolates the step.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

from openblas import coretype_env

HERE = os.path.dirname(os.path.abspath(__file__))
WARMUP = 5


def dp_speed(dp, data, model, steps, devices, env):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        subprocess.run([dp, "train", "--model", model, "--data", data, "--devices", devices, "--batch", "128",
                        "--steps", str(steps), "--metrics", m.name], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(m.name)][WARMUP:]
    samples = sum(sum(r["chunks"]) for r in rows)
    seconds = sum(sum(r["chunks"]) / r["samples_per_s"] for r in rows)
    return samples / seconds


def torch_run(data, model, threads, steps, env, seed=0, evaluate=False):
    cmd = [sys.executable, os.path.join(HERE, "torch_mnist.py"), "--model", model, "--data", data, "--threads",
           str(threads), "--seed", str(seed), "--warmup", str(WARMUP)]
    if steps:
        cmd += ["--steps", str(steps)]
    if evaluate:
        cmd += ["--eval"]
    out = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def dp_accuracy(dp, data, seed, env):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        subprocess.run([dp, "train", "--model", "convnet", "--data", data, "--devices", "host:2", "--batch", "128",
                        "--lr", "0.05", "--momentum", "0.9", "--epochs", "1", "--eval", "--seed", str(seed),
                        "--metrics", m.name], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(m.name)]
    return [r["test_accuracy"] for r in rows if "test_accuracy" in r][-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build/dp")
    ap.add_argument("--data", default="../shared/data/mnist")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--accuracy-seeds", type=int, default=3)
    ap.add_argument("--no-speed", action="store_true", help="only the accuracy comparison")
    a = ap.parse_args()
    env = coretype_env()
    dp = os.path.abspath(a.dp)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; command: {' '.join(sys.argv)}\n")
    print("| model | dp host:2 samples/s | PyTorch 1 thread | PyTorch 2 threads | dp / best PyTorch | target |")
    print("|---|---|---|---|---|---|")
    for model, steps, target in [] if a.no_speed else [("convnet", 120, 2.0), ("mlp", 400, 1.5)]:
        ours = max(dp_speed(dp, a.data, model, steps, "host:2", env) for _ in range(a.repeats))
        t1 = max(torch_run(a.data, model, 1, steps, env)["samples_per_s"] for _ in range(a.repeats))
        t2 = max(torch_run(a.data, model, 2, steps, env)["samples_per_s"] for _ in range(a.repeats))
        ratio = ours / max(t1, t2)
        print(f"| {model} | {ours:.0f} | {t1:.0f} | {t2:.0f} | {ratio:.2f}x | >= {target}x |", flush=True)
    if a.accuracy_seeds:
        seeds = list(range(a.accuracy_seeds))
        ours = [dp_accuracy(dp, a.data, s, env) for s in seeds]
        theirs = [torch_run(a.data, "convnet", 1, 0, env, seed=s, evaluate=True)["test_accuracy"] for s in seeds]
        fmt = lambda v: ", ".join(f"{100 * x:.2f}" for x in v)
        print("\n1 epoch convnet, batch 128, lr 0.05, momentum 0.9, test accuracy (%), seeds "
              f"{seeds[0]}..{seeds[-1]}:\n")
        print("| | per seed | mean |")
        print("|---|---|---|")
        print(f"| dp host:2 | {fmt(ours)} | {100 * statistics.mean(ours):.2f} |")
        print(f"| PyTorch | {fmt(theirs)} | {100 * statistics.mean(theirs):.2f} |")


if __name__ == "__main__":
    main()
