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
    check("points at the hotspot", "\n  GPU0 hotspot: device 0 peaks at" in out, out[-600:])
    # A small gpu0:K share puts device 0 below the others: no hotspot, and why.
    q = subprocess.run([DP, "demo", "--model", "convnet", "--batch", "512", "--split", "gpu0:1"], capture_output=True,
                       text=True, timeout=120)
    check("gpu0:1: device 0 below the others, no hotspot", q.returncode == 0 and "No GPU0 hotspot: device 0 peaks at 0."
          in q.stdout and "the activations it saves outweigh them" in q.stdout, q.stdout[-600:] + q.stderr)
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
    # Gradient accumulation: each micro-batch runs the whole step but the update; DataParallel
    # replicates and reduces on every one of them; device 0 holds one more gradient buffer.
    p = subprocess.run([DP, "demo", "--json", js], capture_output=True, text=True, timeout=120)
    plain = json.load(open(js))
    p = subprocess.run([DP, "demo", "--accumulate", "3", "--steps", "2", "--json", js], capture_output=True, text=True,
                       timeout=120)
    check("accumulate demo runs", p.returncode == 0, p.stderr)
    r = json.load(open(js))
    step = r["steps"][0]
    micro = step.get("micro_batches", [])
    check("accumulate recorded", r["accumulate"] == 3 and len(r["steps"]) == 2 and len(micro) == 3, r.get("accumulate"))
    check("each micro-batch chunked as a batch", [m["chunks"] for m in micro] == [[3, 3, 3, 1]] * 3
          and step["chunks"] == [9, 9, 9, 3], (step["chunks"], [m["chunks"] for m in micro]))
    check("micro-batch losses add up to the step's", abs(sum(m["loss"] for m in micro) - step["loss"]) < 1e-6
          and all(0 < m["loss"] < step["loss"] for m in micro), [m["loss"] for m in micro])
    mphases = [{ph["phase"]: ph for ph in m["phases"]} for m in micro]
    check("every micro-batch replicates and reduces",
          all(transfers(ph["replicate"]) == {(0, d): params for d in (1, 2, 3)}
              and transfers(ph["reduce"]) == {(d, 0): params for d in (1, 2, 3)} for ph in mphases))
    total = {ph["phase"]: ph for ph in step["phases"]}
    check("the step's transfers sum its micro-batches'",
          transfers(total["replicate"]) == {(0, d): 3 * params for d in (1, 2, 3)}
          and transfers(total["load"]) == {("host", 0): 3 * (10 * sample + 10 * 4)}, total["replicate"]["transfers"])
    check("only the last micro-batch updates",
          [ph["update"]["text"].startswith("No update yet") for ph in mphases] == [True, True, False]
          and "the step's one update" in mphases[2]["update"]["text"], [ph["update"]["text"][:40] for ph in mphases])
    check("the loss divides by the step's samples", "over the step's 30 samples" in mphases[0]["loss"]["text"]
          and "divided by 30 samples" in mphases[0]["loss"]["text"], mphases[0]["loss"]["text"])
    out = p.stdout
    check("accumulate narrated", all(f"Micro-batch {i} of 3" in out for i in (1, 2, 3))
          and "3 broadcasts for one update" in out and "reduced the gradients 3 times" in out
          and "step 2: chunks 9,9,9,3" in out and "(3 micro-batches)" in out, out[-3000:])
    gradients = [m["at_peak"]["gradients"] for m in (plain["memory"][0], r["memory"][0])]
    check("device 0 holds one more gradient buffer", gradients[1] == 2 * gradients[0], gradients)
    # Under --sync allreduce only the last micro-batch is all-reduced (DDP's no_sync).
    p = subprocess.run([DP, "demo", "--accumulate", "2", "--sync", "allreduce", "--batch", "8", "--json", js],
                       capture_output=True, text=True, timeout=120)
    r = json.load(open(js))
    texts = [{ph["phase"]: ph["text"] for ph in m["phases"]} for m in r["steps"][0]["micro_batches"]]
    check("no_sync narrated", p.returncode == 0 and texts[0]["reduce"].startswith("Nothing is all-reduced")
          and "ring all-reduce" in texts[1]["reduce"] and "every device held the sum" in p.stdout
          and "all-reduced once, on the last micro-batch" in p.stdout, (p.stderr, texts[0]["reduce"][:80]))
    # Each step shape in its own words: ZeRO's title and diagram, and a bucket count true for the run.
    p = subprocess.run([DP, "demo", "--sync", "zero3", "--model", "mlp", "--devices", "host:2", "--batch", "8"],
                       capture_output=True, text=True, timeout=120)
    check("demo --sync zero3 tells a ZeRO-3 step, each device loading its chunk",
          p.returncode == 0 and p.stdout.startswith("dp demo: one ZeRO-3 step of 'mlp'")
          and "DataParallel step" not in p.stdout.splitlines()[0] and " output |" not in p.stdout
          and "here the model is one bucket (--bucket-mb 25)" in p.stdout and "a bucket or two of the model" not in p.stdout,
          p.stdout[:1500] + p.stderr)
    p = subprocess.run([DP, "demo", "--sync", "zero3", "--model", "convnet", "--devices", "host:2", "--batch", "8",
                        "--bucket-mb", "0.01"], capture_output=True, text=True, timeout=120)
    check("demo --sync zero3 with small buckets: a bucket or two of the model's many",
          p.returncode == 0 and "a bucket or two of the model's " in p.stdout, p.stdout[:1500] + p.stderr)
    p = subprocess.run([DP, "demo", "--sync", "allreduce", "--devices", "host:2", "--batch", "8"],
                       capture_output=True, text=True, timeout=120)
    check("demo --sync allreduce is a DDP step", p.returncode == 0 and p.stdout.startswith("dp demo: one DDP step"),
          p.stdout[:300])
    # More micro-batches than the data holds: a step of all of them, said.
    p = subprocess.run([DP, "demo", "--accumulate", "4", "--generated-size", "20", "--json", js],
                       capture_output=True, text=True, timeout=120)
    r = json.load(open(js))
    check("accumulate beyond the data", p.returncode == 0 and r["accumulate"] == 2
          and "the data holds 2 batches of 10" in p.stdout, (p.stderr, p.stdout[:600]))
    p = subprocess.run([DP, "demo", "--accumulate", "0"], capture_output=True, text=True, timeout=60)
    check("accumulate 0 is a usage error", p.returncode == 2 and "--accumulate" in p.stderr, p.stderr)
    # --recompute blocks: forward keeps the blocks' inputs, backward runs each block's forward again.
    p = subprocess.run([DP, "demo", "--model", "resnet8", "--recompute", "blocks", "--json", js], capture_output=True,
                       text=True, timeout=120)
    texts = {s["phase"]: s["text"] for s in json.load(open(js))["steps"][0]["phases"]} if p.returncode == 0 else {}
    check("recompute narrated", p.returncode == 0 and "keeps only its input" in texts.get("forward", "")
          and "runs that block's forward again" in texts.get("backward", ""), (p.stderr, texts.get("forward", "")[:200]))
    p = subprocess.run([DP, "demo", "--model", "resnet8", "--recompute", "blocks:2", "--json", js], capture_output=True,
                       text=True, timeout=120)
    texts = {s["phase"]: s["text"] for s in json.load(open(js))["steps"][0]["phases"]} if p.returncode == 0 else {}
    check("recompute blocks:2 narrated", p.returncode == 0 and "each of the first 2 of 4 blocks" in texts.get("forward", "")
          and "exist one at a time" in texts.get("backward", ""), (p.stderr, texts.get("forward", "")[:200]))
    # The GPT's --dropout: where the masks come from, and that backward keeps none.
    p = subprocess.run([DP, "demo", "--model", "gpt", "--dropout", "0.2", "--gpt-layers", "1", "--gpt-dim", "32",
                        "--context", "16", "--batch", "8", "--json", js], capture_output=True, text=True, timeout=120)
    texts = {s["phase"]: s["text"] for s in json.load(open(js))["steps"][0]["phases"]} if p.returncode == 0 else {}
    check("dropout narrated", p.returncode == 0 and "Dropout 0.2" in texts.get("forward", "")
          and "however it is split" in texts.get("forward", "") and "keeps no mask" in texts.get("backward", ""),
          (p.stderr, texts.get("forward", "")[:300]))
    p = subprocess.run([DP, "demo", "--model", "gpt", "--gpt-layers", "1", "--gpt-dim", "32", "--context", "16",
                        "--batch", "8", "--json", js], capture_output=True, text=True, timeout=120)
    texts = {s["phase"]: s["text"] for s in json.load(open(js))["steps"][0]["phases"]} if p.returncode == 0 else {}
    check("no dropout, none narrated", p.returncode == 0 and "Dropout" not in texts.get("forward", "x Dropout"))
    p = subprocess.run([DP, "demo", "--device-speed", "1,2"], capture_output=True, text=True, timeout=60)
    check("bad speeds are a usage error", p.returncode == 2 and "--device-speed" in p.stderr, p.stderr)

# Small truths: the parameters counted without the flat array's alignment gaps (the tiny model has
# 784*32 + 32 + 32*10 + 10 = 25450); the optimizer state said to appear after the first step's peak.
p = subprocess.run([DP, "demo", "--devices", "host:3", "--batch", "10"], capture_output=True, text=True, timeout=60)
check("demo: the parameters, not the padded array's floats",
      "master parameters (25450 of them, in one flat array of 25456 floats" in p.stdout, p.stdout[:3000])
# (The convnet's first step peaks in backward, before its update makes the optimizer state; the tiny
# model's peaks in the update itself, the batch still held.)
p = subprocess.run([DP, "demo", "--model", "convnet", "--devices", "host:3", "--batch", "12"], capture_output=True,
                   text=True, timeout=60)
check("demo, one step: the optimizer state not yet in device 0's peak, said so",
      "The optimizer state is not in device 0's peak yet" in p.stdout, p.stdout[-800:])
p = subprocess.run([DP, "demo", "--model", "convnet", "--devices", "host:3", "--batch", "12", "--steps", "2"],
                   capture_output=True, text=True, timeout=60)
check("demo, two steps: the optimizer state in device 0's peak, no note",
      p.returncode == 0 and "The optimizer state is not in device 0's peak yet" not in p.stdout, p.stdout[-800:])

CLI.finish()
