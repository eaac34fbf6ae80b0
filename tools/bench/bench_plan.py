"""dp plan's own cost (targets: GPT-2 small on meta:8 at batch 64, one plan < 5 s and < 1 GiB
resident on the 2-core machine; --compare < 60 s; the planner's memory independent of the planned
device memory; torchvision's resnet50 at 3x224x224 (a model file) on meta:8, --max-batch under 80
GiB < 10 s and < 1 GiB, with --compare < 60 s, and --compare --max-batch within 5x of one
strategy's plan): wall time and peak resident memory (getrusage of the child) of each, median of
repeats (the runs interleaved, so a slow stretch of the machine touches every row alike); and dp
memprof on host:2 against dp plan on meta:2 for the same small run (what the math costs). Prints
Markdown.

usage: bench_plan.py [--dp build/dp] [--repeats 3]
"""
import os
import statistics
import subprocess
import tempfile

from dp_runs import start

GPT2 = ["--model", "gpt", "--gpt-layers", "12", "--gpt-heads", "12", "--gpt-dim", "768", "--context", "1024",
        "--vocab", "50304", "--optimizer", "adamw", "--devices", "meta:8", "--batch", "64"]


def resnet50_file(env):
    """torchvision's resnet50 exported at 3x224x224 (tools/export_model.py), or None without torchvision."""
    path = os.path.join(tempfile.mkdtemp(), "resnet50-224.json")
    p = subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                         "export_model.py"), "torchvision.models:resnet50", "--kwargs",
                        '{"num_classes": 10}', "--input", "3x224x224", "--out", path], capture_output=True, env=env)
    return path if p.returncode == 0 else None


def main():
    a, env, dp = start()
    r50 = resnet50_file(env)
    one = [dp, "plan", "--model", r50, "--devices", "meta:8", "--batch", "256", "--device-memory", "80GiB"] if r50 else None
    big = one + ["--max-batch"] if r50 else None
    rows = [("GPT-2 small (163M parameters, untied head), meta:8, batch 64, 80 GiB",
             [dp, "plan"] + GPT2 + ["--device-memory", "80GiB"], "< 5 s, < 1 GiB"),
            ("the same, 800 GiB a device", [dp, "plan"] + GPT2 + ["--device-memory", "800GiB"], "memory independent of it"),
            ("the same, --compare (24 strategies)", [dp, "plan"] + GPT2 + ["--device-memory", "80GiB", "--compare"],
             "< 60 s"),
            ("the same, --compare --max-batch", [dp, "plan"] + GPT2 + ["--device-memory", "80GiB", "--compare",
                                                                     "--max-batch"], "< 60 s"),
            ("torchvision resnet50 at 3x224x224 (a model file), meta:8, batch 256, 80 GiB: one plan", one, ""),
            ("the same, --max-batch", big, "< 10 s, < 1 GiB"),
            ("the same, --compare --max-batch", big + ["--compare"] if big else None,
             "< 60 s; within 5x of one plan"),
            ("convnet, batch 128: dp memprof on host:2", [dp, "memprof", "--model", "convnet", "--devices", "host:2"], ""),
            ("convnet, batch 128: dp plan on meta:2", [dp, "plan", "--model", "convnet", "--devices", "meta:2"], "")]
    print("| run | wall (median) | peak resident | target |")
    print("|---|---|---|---|")
    walls = [[] for _ in rows]  # by row: two rows share a name ("the same, ...")
    rss = [0 for _ in rows]
    for _ in range(a.repeats):
        for i, (name, cmd, target) in enumerate(rows):
            if cmd is None:
                continue
            # Each run in a fresh child of its own, so that the high-water mark is this command's.
            out = subprocess.run(["/usr/bin/python3", "-c",
                                  "import resource,subprocess,sys,time;t=time.monotonic();"
                                  "subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL);"
                                  "print(time.monotonic()-t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"]
                                 + cmd, capture_output=True, text=True, env=env).stdout.split()
            walls[i].append(float(out[0]))
            rss[i] = max(rss[i], int(out[1]) * 1024)
    for i, (name, cmd, target) in enumerate(rows):
        if cmd is None:
            print(f"| {name} | not run: no torchvision to export it | | {target} |")
            continue
        print(f"| {name} | {statistics.median(walls[i]):.2f} s | {rss[i] / 2**20:.0f} MiB | {target} |")
    if r50:
        one_plan, compared = statistics.median(walls[4]), statistics.median(walls[6])
        print(f"\nresnet50: --compare --max-batch takes {compared / one_plan:.1f}x one plan")


if __name__ == "__main__":
    main()
