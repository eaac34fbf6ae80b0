"""dp memprof predicts dp train: for every model and mode, the same steps allocate the same bytes on
every device, phase by phase (memprof's --json timeline against train's --metrics rows), and with a
capacity both run out of memory at the same point (the same device, request, bytes in use and
breakdown, in the same phase), and dp plan on meta devices says the same as memprof on host devices.
dp train waits per phase on host devices (--host-sync auto), so this holds by running one path;
what the test guards is everything around it: the optimizer, the data, the metrics' norm pass, the
defaults each command picks.

usage: test_memory_agrees.py DP_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli  # noqa: E402

CLI = Cli()
DP, check = CLI.dp, CLI.check
STEPS = 2
GPT = ["--model", "gpt", "--gpt-layers", "2", "--gpt-heads", "2", "--gpt-dim", "32", "--context", "16"]

# Every model, and every mode that changes what a step allocates.
CASES = [
    ["--model", "mlp", "--devices", "host:3", "--batch", "24"],
    ["--model", "mlp", "--devices", "host:3", "--batch", "24", "--loss", "in-replica"],
    ["--model", "mlp", "--devices", "host:3", "--batch", "24", "--split", "chunks:4,10,10"],
    ["--model", "mlp", "--devices", "host:4", "--batch", "32", "--split", "balance-memory"],
    ["--model", "mlp", "--devices", "host:2", "--batch", "16", "--precision", "fp16", "--optimizer", "adamw"],
    ["--model", "convnet", "--devices", "host:2", "--batch", "16"],
    ["--model", "convnet", "--devices", "host:2", "--batch", "16", "--sync", "allreduce"],
    ["--model", "convnet", "--devices", "host:2", "--batch", "16", "--precision", "bf16"],
    ["--model", "convnet", "--devices", "host:2", "--batch", "8", "--accumulate", "2"],
    ["--model", "mlp", "--devices", "host:2", "--batch", "16", "--sync", "zero1"],
    ["--model", "mlp", "--devices", "host:2", "--batch", "16", "--sync", "zero2", "--split", "gpu0:1"],
    ["--model", "resnet8", "--devices", "host:2", "--batch", "4", "--sync", "zero3"],
    ["--model", "resnet8", "--devices", "host:2", "--batch", "4", "--recompute", "blocks"],
    ["--model", "resnet18", "--devices", "host:2", "--batch", "2"],
    GPT + ["--devices", "host:2", "--batch", "4"],
    GPT + ["--devices", "host:2", "--batch", "4", "--sync", "zero2", "--precision", "bf16", "--recompute", "blocks"],
]


def run(args):
    return subprocess.run([DP] + args, capture_output=True, text=True, errors="replace", timeout=300)


def memprof_timeline(report):
    """{(step, phase): [each device's peak]} of a memprof --json report."""
    return {(e["step"], e["phase"]): [d["peak"] for d in e["devices"]] for e in report["timeline"]}


def train_timeline(metrics):
    """The same from dp train's --metrics rows (none when a row has no per-phase memory)."""
    out = {}
    for line in open(metrics):
        row = json.loads(line)
        if "step" not in row:
            continue
        phases = row.get("phase_peak_bytes", {})
        for phase, peaks in phases.items():
            out[(row["step"], phase)] = peaks
        highest = [max(per_device) for per_device in zip(*phases.values())]
        check(f"step {row['step']}: peak_bytes is each device's highest phase peak",
              phases and row.get("peak_bytes") == highest, row)
    return out


def first_difference(a, b):
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            return f"step {key[0]} {key[1]}: memprof {a.get(key)}, train {b.get(key)}"
    return ""


def error_line(text):
    return next((line for line in text.splitlines() if line.startswith("error:")), "")


with tempfile.TemporaryDirectory() as tmp:
    report, metrics = os.path.join(tmp, "m.json"), os.path.join(tmp, "t.jsonl")
    if subprocess.run([sys.executable, "-c", "import torch.fx"], capture_output=True).returncode == 0:
        net = os.path.join(tmp, "net.py")
        with open(net, "w") as f:
            f.write("import torch.nn as nn\n\ndef net():\n    return nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), "
                    "nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 16 * 16, 10))\n")
        exported = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..", "..", "tools",
                                                                "export_model.py"), net + ":net", "--input", "3x32x32",
                                   "--out", os.path.join(tmp, "net.json")], capture_output=True, text=True)
        check("a model file exports", exported.returncode == 0, exported.stderr)
        CASES.append(["--model", os.path.join(tmp, "net.json"), "--devices", "host:2", "--batch", "8"])
    else:
        print("no PyTorch: the model-file case is left out")

    for args in CASES:
        name = " ".join(a if not a.endswith(".json") else "net.json" for a in args)
        p = run(["memprof", "--steps", str(STEPS), "--json", report] + args)
        check(f"memprof {name}", p.returncode == 0, p.stderr[-800:])
        t = run(["train", "--steps", str(STEPS), "--metrics", metrics] + args)
        check(f"train {name}", t.returncode == 0, t.stderr[-800:])
        if p.returncode or t.returncode:
            continue
        expected, seen = memprof_timeline(json.load(open(report))), train_timeline(metrics)
        check(f"{name}: train has every step's phases", len(seen) >= STEPS * 8, sorted(seen))
        check(f"{name}: each device's memory, phase by phase, as memprof's", expected == seen,
              first_difference(expected, seen))

    # Waiting once per step (CUDA's default; asked for here): no per-phase memory, but each device's
    # peak in the step. The host allocates some buffers before the devices reach their phase (step
    # 1's optimizer state is allocated when the update is enqueued, before forward has run), never
    # later: device 0 peaks higher in step 1, and no device lower than memprof's in any step.
    t = run(["train", "--steps", "2", "--metrics", metrics, "--host-sync", "step"] + CASES[0])
    rows = [json.loads(line) for line in open(metrics)]
    p = run(["memprof", "--steps", "2", "--json", report] + CASES[0])
    phased = {}
    for (step, _), peaks in memprof_timeline(json.load(open(report))).items():
        phased[step] = [max(a, b) for a, b in zip(phased.get(step, peaks), peaks)]
    check("--host-sync step: each device's step peak, no per-phase memory", t.returncode == 0 and p.returncode == 0
          and all("phase_peak_bytes" not in r and len(r["peak_bytes"]) == 3 for r in rows), t.stderr + str(rows))
    check("--host-sync step: step 1 peaks above memprof's on device 0, no device below memprof's",
          rows[0]["peak_bytes"][0] > phased[1][0] and all(
              a >= b for r in rows for a, b in zip(r["peak_bytes"], phased[r["step"]])), (rows, phased))

    # Out of memory at the same point: the GPT whose train run once failed in step 1's forward with
    # the optimizer state already held while memprof failed later in gather, and one run per kind.
    for args, capacity in [(["--model", "gpt", "--gpt-layers", "2", "--gpt-dim", "128", "--batch", "16",
                             "--devices", "host:2"], "20MiB"),
                           (["--model", "convnet", "--devices", "host:4", "--batch", "64"], "3.8MiB"),
                           (["--model", "mlp", "--devices", "host:2", "--batch", "512"], "8MiB"),  # in step 2
                           (["--model", "resnet8", "--devices", "host:2", "--batch", "16", "--sync", "zero3"], "3MiB")]:
        name = " ".join(args) + " --device-memory " + capacity
        if os.path.exists(report):
            os.remove(report)
        p = run(["memprof", "--steps", str(STEPS), "--json", report, "--device-memory", capacity] + args)
        t = run(["train", "--steps", str(STEPS), "--device-memory", capacity] + args)
        check(f"{name}: both out of memory (exit 3)", p.returncode == 3 and t.returncode == 3,
              f"memprof {p.returncode} {p.stderr[-300:]}\ntrain {t.returncode} {t.stderr[-300:]}")
        check(f"{name}: the same device, request, bytes in use and phase", error_line(p.stderr) == error_line(t.stderr)
              and error_line(p.stderr) != "", f"\nmemprof: {error_line(p.stderr)}\ntrain:   {error_line(t.stderr)}")
        oom = json.load(open(report))["out_of_memory"]
        check(f"{name}: memprof's report names it", oom is not None and oom["message"] in error_line(t.stderr), oom)
        on_meta = [a.replace("host:", "meta:") for a in args]
        pl = run(["plan", "--steps", str(STEPS), "--device-memory", capacity] + on_meta)
        check(f"{name}: dp plan on meta devices fails there too", pl.returncode == 3 and
              error_line(pl.stderr).replace("meta:", "host:") == error_line(p.stderr), error_line(pl.stderr))

CLI.finish()
