"""Across processes against one process (issue target: within 10%): `mpirun -np 2 dp train --sync
allreduce --devices host:1` (batch B per process) against `dp train --sync allreduce --devices
host:2` (batch 2B), same model and data, in one invocation; samples/s from rank 0's metrics,
the first 3 steps not timed; median of interleaved runs. Prints Markdown.

usage: bench_mpi.py [--dp build/dp] [--repeats 3]
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

WARMUP = 3


def coretype():
    return "SkylakeX" if "avx512f" in open("/proc/cpuinfo").read() else "Haswell"


def samples_per_s(cmd, env, batch=128):
    """Samples/s over the timed steps: each step's time is the global batch over its samples_per_s."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        subprocess.run(cmd + ["--metrics", m.name], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(m.name) if '"step"' in l][WARMUP:]
    return batch * len(rows) / sum(batch / r["samples_per_s"] for r in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build/dp")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    env = dict(os.environ, OPENBLAS_CORETYPE=coretype(), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    dp = os.path.abspath(a.dp)
    mpirun = shutil.which("mpirun")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']}; "
          f"command: {' '.join(sys.argv)}\n")
    print("| model | global batch | one process host:2 samples/s | mpirun -np 2, host:1 each | ratio |")
    print("|---|---|---|---|---|")
    for model, steps in (("mlp", 60), ("convnet", 25), ("resnet8", 10)):
        common = ["train", "--model", model, "--sync", "allreduce", "--steps", str(steps), "--generated-size",
                  str(128 * steps)]
        runs = []
        for _ in range(a.repeats):
            one = samples_per_s([dp] + common + ["--devices", "host:2", "--batch", "128"], env)
            two = samples_per_s([mpirun, "-np", "2", "--bind-to", "none", dp] + common +
                                ["--devices", "host:1", "--batch", "64"], env)
            runs.append((one, two))
        one, two = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"| {model} | 128 | {one:.0f} | {two:.0f} | {two / one:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
