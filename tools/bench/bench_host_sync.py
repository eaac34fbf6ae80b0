"""The host waiting once per step against after every phase: `dp train --host-sync step` against `--host-sync phase`, same model, devices, batch and
data, in one invocation; samples/s from the metrics (each step timed on the host, start to end),
the first 3 steps not timed; median of interleaved runs. Also each run's mean phase times. Prints
Markdown.

usage: bench_host_sync.py [--dp build/dp] [--repeats 5]
"""
import json
import statistics
import subprocess
import tempfile

from dp_runs import start

WARMUP = 3


def measure(cmd, env, batch):
    """Samples/s over the timed steps, and the mean per-phase milliseconds."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        subprocess.run(cmd + ["--metrics", m.name], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(m.name) if '"step"' in l][WARMUP:]
    sps = batch * len(rows) / sum(batch / r["samples_per_s"] for r in rows)
    phases = {k: statistics.mean(r["phase_ms"][k] for r in rows) for k in rows[0]["phase_ms"]}
    return sps, phases


def main():
    a, env, dp = start(repeats=5)
    print("| model | devices | batch | --sync | --host-sync phase samples/s | --host-sync step | ratio |")
    print("|---|---|---|---|---|---|---|")
    notes = []
    for model, devices, batch, steps, sync in (("mlp", "host:2", 32, 120, "reduce"), ("mlp", "host:2", 128, 60, "reduce"),
                                               ("mlp", "host:4", 128, 60, "reduce"), ("convnet", "host:2", 128, 25, "reduce"),
                                               ("convnet", "host:4", 128, 25, "reduce"),
                                               ("mlp", "host:2", 128, 60, "allreduce"),
                                               ("convnet", "host:2", 128, 25, "allreduce")):
        common = [dp, "train", "--model", model, "--devices", devices, "--batch", str(batch), "--steps", str(steps),
                  "--generated-size", str(batch * steps), "--sync", sync]
        runs = []
        for _ in range(a.repeats):
            runs.append((measure(common + ["--host-sync", "phase"], env, batch),
                         measure(common + ["--host-sync", "step"], env, batch)))
        phase = statistics.median(r[0][0] for r in runs)
        step = statistics.median(r[1][0] for r in runs)
        print(f"| {model} | {devices} | {batch} | {sync} | {phase:.0f} | {step:.0f} | {step / phase:.2f}x |", flush=True)
        fmt = lambda p: ", ".join(f"{k} {v:.3f}" for k, v in p.items())  # noqa: E731
        notes.append(f"- {model} {devices} batch {batch} {sync}, ms per phase (last run): phase-sync {fmt(runs[-1][0][1])}; "
                     f"step-sync {fmt(runs[-1][1][1])}")
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
