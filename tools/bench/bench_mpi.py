"""Across processes against one process (target: within 10%): `mpirun -np 2 dp train --sync
allreduce --devices host:1` (batch B per process) against `dp train --sync allreduce --devices
host:2` (batch 2B), same model and data, in one invocation; median of interleaved runs. Prints Markdown.

Each run is long enough to reach steady state (about 2 s of training for the mlp) and its first
10% of steps are not timed. The figure is wall-clock: rank 0's metrics `time_s` over the timed
steps, so what either side does between steps (the next batch, metrics) counts, as it does for a
user; the ranks meet every step, so rank 0's clock is the job's. The step-only figure (the sum of
the steps' own times, `samples_per_s`, which leaves that work out) is printed beside it.

usage: bench_mpi.py [--dp build/dp] [--repeats 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile

from openblas import coretype_env, machine_line

WARMUP_SHARE = 0.1  # of the steps, not timed


def samples_per_s(cmd, env, batch=128):
    """(wall-clock, step-only) samples/s over the timed steps."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        subprocess.run(cmd + ["--metrics", m.name], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(m.name) if '"step"' in l]
    warm = max(3, int(len(rows) * WARMUP_SHARE))
    timed = rows[warm:]
    wall = batch * len(timed) / (timed[-1]["time_s"] - rows[warm - 1]["time_s"])
    step_only = batch * len(timed) / sum(batch / r["samples_per_s"] for r in timed)
    return wall, step_only


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build/dp")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    env = coretype_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    dp = os.path.abspath(a.dp)
    mpirun = shutil.which("mpirun")
    print(machine_line(', global batch 128'))
    print("| model | steps | one process host:2 samples/s | mpirun -np 2, host:1 each | ratio | step-only ratio |")
    print("|---|---|---|---|---|---|")
    for model, steps in (("mlp", 1000), ("convnet", 150), ("resnet8", 40)):
        common = ["train", "--model", model, "--sync", "allreduce", "--steps", str(steps), "--generated-size",
                  str(128 * steps)]
        runs = []
        for _ in range(a.repeats):
            one = samples_per_s([dp] + common + ["--devices", "host:2", "--batch", "128"], env)
            two = samples_per_s([mpirun, "-np", "2", "--bind-to", "none", dp] + common +
                                ["--devices", "host:1", "--batch", "64"], env)
            runs.append((one, two))
        one, two = (statistics.median(r[0][0] for r in runs), statistics.median(r[1][0] for r in runs))
        step_one, step_two = (statistics.median(r[0][1] for r in runs), statistics.median(r[1][1] for r in runs))
        print(f"| {model} | {steps} | {one:.0f} | {two:.0f} | {two / one:.2f}x | {step_two / step_one:.2f}x |",
              flush=True)


if __name__ == "__main__":
    main()
