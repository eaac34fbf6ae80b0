"""--sync allreduce against DataParallel's reduce on host devices, in one invocation (its target):
steps/s of each on mlp, convnet and resnet8 at batch 128 on host:2 and host:4 (SGD, generated
data, the first tenth of the steps (3 at least) not timed; median of interleaved runs), and the share of the all-reduce
time hidden under backward, read from a `dp demo --sync allreduce --trace` timeline (per device:
the part of its all-reduce slices that lies inside its backward slice). Prints Markdown.

usage: bench_allreduce.py [--dp build/dp] [--repeats 3]
"""
import json
import os
import statistics
import subprocess
import tempfile

from dp_runs import start

# About a second or two a run on two cores: long enough that a stray pause of the machine is not
# the figure.
STEPS = {"mlp": 300, "convnet": 80, "resnet8": 30}


def steps_per_s(dp, model, devices, sync, env):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        subprocess.run([dp, "train", "--model", model, "--devices", devices, "--batch", "128", "--steps",
                        str(STEPS[model]), "--generated-size", str(128 * STEPS[model]), "--sync", sync, "--metrics",
                        m.name], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(m.name)]
        rows = rows[max(3, len(rows) // 10):]
    return len(rows) / sum(sum(r["chunks"]) / r["samples_per_s"] for r in rows)


def hidden_share(dp, model, devices, env):
    """Share of all-reduce time that overlaps the same device's backward, over the traced steps."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "t.json")
        subprocess.run([dp, "demo", "--model", model, "--devices", devices, "--batch", "128", "--steps", "4",
                        "--sync", "allreduce", "--bucket-mb", "1", "--trace", trace], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        events = json.load(open(trace))["traceEvents"]
    backward = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "backward" and e["name"].startswith("backward replica"):
            backward.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    total = hidden = 0.0
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "allreduce":
            continue
        device_tid = e["tid"] - 1000  # the all-reduce track of device d sits 1000 above its stream's
        a, b = e["ts"], e["ts"] + e["dur"]
        total += b - a
        for s, t in backward.get(device_tid, []):
            hidden += max(0.0, min(b, t) - max(a, s))
    return hidden / total if total else 0.0


def main():
    a, env, dp = start()
    print("| model | devices | reduce steps/s | allreduce steps/s | allreduce / reduce | all-reduce hidden under backward |")
    print("|---|---|---|---|---|---|")
    for devices in ("host:2", "host:4"):
        for model in ("mlp", "convnet", "resnet8"):
            runs = [(steps_per_s(dp, model, devices, "reduce", env), steps_per_s(dp, model, devices, "allreduce", env))
                    for _ in range(a.repeats)]
            red, ar = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            share = hidden_share(dp, model, devices, env)
            print(f"| {model} | {devices} | {red:.1f} | {ar:.1f} | {ar / red:.2f}x | {100 * share:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
