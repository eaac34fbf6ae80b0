"""dp demo's structure (not its timings): the phases in order, PyTorch's chunk sizes, bytes per
link computed from shapes, the memory summary, and a Chrome trace with a track per device and
flow arrows for copies.

usage: test_demo.py DP_BINARY
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
PHASES = ["load", "scatter", "replicate", "forward", "gather", "loss", "backward", "reduce", "update"]


def transfers(phase):
    return {(t["from"], t["to"]): t["bytes"] for t in phase["transfers"]}


with tempfile.TemporaryDirectory() as tmp:
    js, trace = os.path.join(tmp, "demo.json"), os.path.join(tmp, "trace.json")
    p = subprocess.run([DP, "demo", "--json", js, "--trace", trace], capture_output=True, text=True, timeout=120)
    check("demo runs", p.returncode == 0, p.stderr)
    out = p.stdout
    for i, name in enumerate(PHASES):
        check(f"narrates {name}", f"{i + 1}. {name}" in out)
    check("explains chunking", "torch.chunk(10, 4)" in out and "3,3,3,1" in out, out[:2000])
    check("points at the hotspot", "GPU0 hotspot" in out)
    check("ascii transfers", "d0 --[9.19 KiB]--> d1" in out and "host --[" in out)

    r = json.load(open(js))
    step = r["steps"][0]
    check("defaults", r["devices"] == 4 and r["batch"] == 10 and r["model"] == "tiny")
    check("chunks", step["chunks"] == [3, 3, 3, 1], step["chunks"])
    phases = {ph["phase"]: ph for ph in step["phases"]}
    check("phase order", [ph["phase"] for ph in step["phases"]] == PHASES)
    sample = 784 * 4
    # The flat parameter array: every entry starts at a multiple of 16 floats (models/model.hpp).
    def aligned(n):
        return (n + 15) // 16 * 16
    params = sum(aligned(n) for n in (784 * 32, 32, 32 * 10, 10)) * 4
    check("load bytes", transfers(phases["load"]) == {("host", 0): 10 * sample + 10 * 4}, phases["load"])
    check("scatter bytes", transfers(phases["scatter"]) == {(0, 1): 3 * sample, (0, 2): 3 * sample, (0, 3): sample},
          phases["scatter"]["transfers"])
    check("replicate bytes", transfers(phases["replicate"]) == {(0, d): params for d in (1, 2, 3)},
          phases["replicate"]["transfers"])
    check("forward moves nothing", transfers(phases["forward"]) == {})
    check("gather bytes", transfers(phases["gather"]) == {(1, 0): 120, (2, 0): 120, (3, 0): 40},
          phases["gather"]["transfers"])
    check("backward scatters the loss gradient", transfers(phases["backward"]) == {(0, 1): 120, (0, 2): 120, (0, 3): 40})
    check("reduce bytes", transfers(phases["reduce"]) == {(d, 0): params for d in (1, 2, 3)},
          phases["reduce"]["transfers"])
    check("tensors", {"name": "gathered outputs", "shape": [10, 10], "device": 0, "dtype": "float32"}
          in phases["gather"]["tensors"])
    check("what transfers carry", phases["replicate"]["carried"] == "float32 parameters", phases["replicate"])
    check("memory summary", len(r["memory"]) == 4 and r["gpu0_excess"] > 1.0, r.get("memory"))

    t = json.load(open(trace))["traceEvents"]
    names = {e["args"]["name"] for e in t if e["ph"] == "M" and e["name"] == "thread_name"}
    check("a track per device", all(any(n.startswith(f"device {d} ") for n in names) for d in range(4)), names)
    check("phase slices", {e["name"] for e in t if e["ph"] == "X" and e["tid"] == 0} >= set(PHASES))
    starts = {e["id"] for e in t if e["ph"] == "s"}
    ends = {e["id"] for e in t if e["ph"] == "f"}
    check("flow arrows for copies", len(starts) >= 9 and starts == ends, (len(starts), len(ends)))
    check("memory counters", any(e["ph"] == "C" for e in t))

    # The fewer-chunks rule: B=9 on 4 devices gives 3,3,3 and device 3 sits out.
    p = subprocess.run([DP, "demo", "--batch", "9", "--json", js], capture_output=True, text=True, timeout=120)
    r = json.load(open(js))
    check("fewer chunks", r["steps"][0]["chunks"] == [3, 3, 3, 0] and "sit this step out" in p.stdout)
    # Mixed speeds with --split auto: later steps are summarised and the split moves to the fast devices.
    p = subprocess.run([DP, "demo", "--devices", "host:2", "--device-speed", "1,0.25", "--split", "auto", "--model",
                        "convnet", "--batch", "32", "--steps", "4", "--json", js], capture_output=True, text=True,
                       timeout=300)
    r = json.load(open(js))
    last = r["steps"][-1]["chunks"]
    check("auto split moves work to the fast device", p.returncode == 0 and last[0] > last[1], (p.stderr, last))
    # In-replica loss: only scalars are gathered (2 floats from each of the 4 replicas).
    p = subprocess.run([DP, "demo", "--loss", "in-replica", "--json", js], capture_output=True, text=True, timeout=120)
    r = json.load(open(js))
    gather = {ph["phase"]: ph for ph in r["steps"][0]["phases"]}["gather"]
    check("in-replica gathers scalars", p.returncode == 0 and transfers(gather) == {(1, 0): 8, (2, 0): 8, (3, 0): 8}
          and "Only scalars travel" in p.stdout, (p.stderr, gather["transfers"]))
    # Mixed precision: replicas, outputs and gradients travel in 16 bits, half float32's bytes.
    p = subprocess.run([DP, "demo", "--precision", "bf16", "--json", js], capture_output=True, text=True, timeout=120)
    check("bf16 demo runs", p.returncode == 0, p.stderr)
    r = json.load(open(js))
    phases = {ph["phase"]: ph for ph in r["steps"][0]["phases"]}
    check("bf16 replicate bytes", transfers(phases["replicate"]) == {(0, d): params // 2 for d in (1, 2, 3)},
          phases["replicate"]["transfers"])
    check("bf16 reduce bytes", transfers(phases["reduce"]) == {(d, 0): params // 2 for d in (1, 2, 3)})
    check("bf16 gather bytes", transfers(phases["gather"]) == {(1, 0): 60, (2, 0): 60, (3, 0): 20})
    dtypes = {t["name"]: t["dtype"] for ph in phases.values() for t in ph["tensors"]}
    check("bf16 tensors named with their precision",
          dtypes.get("replica 1 parameters") == "bfloat16" and dtypes.get("gathered outputs") == "bfloat16"
          and dtypes.get("master gradients") == "float32" and dtypes.get("momentum") == "float32"
          and dtypes.get("labels") == "int32", dtypes)
    check("bf16 narrated", r["precision"] == "bf16" and "(carried: bfloat16 parameters)" in p.stdout
          and "rounds the float32 master parameters" in p.stdout, p.stdout[:3000])
    p = subprocess.run([DP, "demo", "--device-speed", "1,2"], capture_output=True, text=True, timeout=60)
    check("bad speeds are a usage error", p.returncode == 2 and "--device-speed" in p.stderr, p.stderr)

CLI.finish()
