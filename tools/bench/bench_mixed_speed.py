"""--split auto against --split even on mixed-speed simulated devices, in one invocation
(target: convnet, batch 128, host:2 with speeds 1,0.25: auto >= 1.8x even; ideal 2.5x).

usage: bench_mixed_speed.py [--dp build/dp] [--data ../shared/data/mnist] [--steps 60] [--skip 10]
Samples/s over the steps after --skip (auto measures and rebalances during the first steps).
"""
import argparse
import json
import os
import subprocess
import tempfile


def run(dp, data, split, speeds, steps, skip):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        cmd = [dp, "train", "--model", "convnet", "--devices", "host:2", "--batch", "128", "--split", split,
               "--device-speed", speeds, "--steps", str(steps), "--metrics", m.name]
        if data:
            cmd += ["--data", data]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(m.name)]
    timed = rows[skip:]
    samples = sum(sum(r["chunks"]) for r in timed)
    seconds = sum(sum(r["chunks"]) / r["samples_per_s"] for r in timed)
    changes = [f"step {r['step']}: {r['split_change']}" for r in rows if "split_change" in r]
    return samples / seconds, rows[-1]["chunks"], changes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build/dp")
    ap.add_argument("--data", default="../shared/data/mnist")
    ap.add_argument("--speeds", default="1,0.25")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=10)
    a = ap.parse_args()
    dp = os.path.abspath(a.dp)
    even, even_chunks, _ = run(dp, a.data, "even", a.speeds, a.steps, a.skip)
    auto, auto_chunks, changes = run(dp, a.data, "auto", a.speeds, a.steps, a.skip)
    print("| split | samples/s | final chunks |\n|---|---|---|")
    print(f"| even | {even:.0f} | {even_chunks} |")
    print(f"| auto | {auto:.0f} | {auto_chunks} |")
    print(f"\nauto / even = {auto / even:.2f}x (target >= 1.8x, ideal 2.5x)")
    for c in changes:
        print(f"- {c}")


if __name__ == "__main__":
    main()
