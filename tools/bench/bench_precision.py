"""Mixed precision's targets:
- memory: dp memprof on host:4 in fp32, bf16 and fp16 for convnet, resnet18 and the GPT: device 0's
  peak and, at that peak, every category (target: bf16 <= 0.6x fp32 where activations dominate);
- accuracy: one epoch of the convnet on MNIST, host:2, fp32 and bf16 with the same seeds (target:
  bf16 within 0.3 points of fp32, averaged over the seeds), with each run's samples/s;
- --allreduce: the memory table under --sync allreduce (DDP under autocast) instead, with device 0's
  peak against the largest other device's (target: <= 1.05x), and the MNIST runs with --sync allreduce.

usage: bench_precision.py [--dp build/dp] [--mnist ../shared/data/mnist] [--seeds 0,1,2] [--skip-accuracy]
                          [--allreduce]
(prints Markdown tables)
"""
import argparse
import json
import os
import re
import subprocess
import tempfile

CATEGORIES = ["parameters", "gradients", "optimizer", "inputs", "activations", "gathered outputs", "loss",
              "reduce buffers", "workspace"]
MEMPROF = [
    ("convnet", ["--batch", "512"]),
    ("resnet18", ["--batch", "128"]),
    ("resnet18", ["--batch", "512"]),  # activations dominate
    ("gpt", ["--batch", "16"]),  # 4 layers, 4 heads, C 256, T 128; generated corpus (vocabulary 256)
    ("gpt", ["--batch", "64"]),
]


def mib(b):
    return f"{b / 2**20:.2f}"


MEMPROF_ALLREDUCE = [
    ("convnet", ["--batch", "512"]),
    ("resnet18", ["--batch", "128"]),
    ("gpt", ["--batch", "64"]),
]


def memprof(dp, model, extra, precision, sync):
    with tempfile.NamedTemporaryFile(suffix=".json") as js:
        subprocess.run([dp, "memprof", "--model", model, "--devices", "host:4", "--precision", precision, "--json",
                        js.name, "--sync", sync] + extra, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return json.load(open(js.name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build/dp")
    ap.add_argument("--mnist", default="../shared/data/mnist")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--allreduce", action="store_true")
    a = ap.parse_args()
    dp = os.path.abspath(a.dp)
    sync = "allreduce" if a.allreduce else "reduce"

    print("| model | precision | d0 peak MiB (phase) | vs fp32 | d0 / largest other | " + " | ".join(CATEGORIES) + " |")
    print("|---|---|---|---|---|" + "---|" * len(CATEGORIES))
    for model, extra in MEMPROF_ALLREDUCE if a.allreduce else MEMPROF:
        base = None
        for precision in ("fp32", "bf16", "fp16"):
            r = memprof(dp, model, extra, precision, sync)
            d0 = r["devices"][0]
            base = base or d0["peak_bytes"]
            cats = " | ".join(mib(d0["at_peak"].get(c, 0)) for c in CATEGORIES)
            print(f"| {model} {' '.join(extra)} | {precision} | {mib(d0['peak_bytes'])} ({d0['peak_phase']}) | "
                  f"{d0['peak_bytes'] / base:.2f}x | {r['gpu0_excess']:.2f}x | {cats} |", flush=True)

    if a.skip_accuracy:
        return
    print()
    print("| seed | fp32 accuracy | bf16 accuracy | bf16 − fp32 | fp32 samples/s | bf16 samples/s |")
    print("|---|---|---|---|---|---|")
    diffs = []
    for seed in a.seeds.split(","):
        acc, sps = {}, {}
        for precision in ("fp32", "bf16"):
            p = subprocess.run([dp, "train", "--model", "convnet", "--data", a.mnist, "--devices", "host:2", "--epochs",
                                "1", "--eval", "--seed", seed, "--precision", precision, "--sync", sync], check=True,
                               capture_output=True, text=True)
            acc[precision] = float(re.search(r"test accuracy ([0-9.]+)%", p.stdout).group(1))
            sps[precision] = float(re.search(r"([0-9.]+) samples/s", p.stdout).group(1))
        diffs.append(acc["bf16"] - acc["fp32"])
        print(f"| {seed} | {acc['fp32']:.2f}% | {acc['bf16']:.2f}% | {diffs[-1]:+.2f} | {sps['fp32']:.0f} | "
              f"{sps['bf16']:.0f} |", flush=True)
    print(f"| mean | | | {sum(diffs) / len(diffs):+.2f} | | |")


if __name__ == "__main__":
    main()
