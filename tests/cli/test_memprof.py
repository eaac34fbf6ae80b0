"""dp memprof end to end: the table, the JSON report's fields, the SVG chart, the trace; the
out-of-memory reproduction (exit 3, message with device, request, phase and breakdown,
remedies, the report still written); bad sizes; balance-memory, in-replica loss, gradient
accumulation and --recompute through the CLI.

usage: test_memprof.py DP_BINARY
"""
import json
import re
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli  # noqa: E402

CLI = Cli()
DP, check = CLI.dp, CLI.check
CATEGORIES = {"parameters", "gradients", "optimizer", "inputs", "activations", "gathered outputs", "loss",
              "reduce buffers", "workspace", "gathered parameters"}


def memprof(*args):
    return subprocess.run([DP, "memprof", "--batch", "64"] + list(args), capture_output=True, text=True, timeout=300)


with tempfile.TemporaryDirectory() as tmp:
    js, svg, trace = (os.path.join(tmp, f) for f in ("m.json", "m.svg", "t.json"))
    p = memprof("--model", "mlp", "--devices", "host:4", "--json", js, "--svg", svg, "--trace", trace)
    check("runs", p.returncode == 0, p.stderr)
    check("table", "gpu0 excess" in p.stdout and "d3" in p.stdout and "optimizer" in p.stdout, p.stdout)
    check("it says what it wrote", f"wrote: --json {js}, --svg {svg}, --trace {trace}" in p.stdout, p.stdout[-300:])
    r = json.load(open(js))
    check("devices", [d["index"] for d in r["devices"]] == [0, 1, 2, 3])
    d0 = r["devices"][0]
    check("fields", {"index", "name", "peak_bytes", "peak_phase", "at_peak", "peak_by_category"} <= set(d0), d0)
    check("categories", set(d0["at_peak"]) == CATEGORIES and set(d0["peak_by_category"]) == CATEGORIES)
    check("at_peak sums to peak", all(sum(d["at_peak"].values()) == d["peak_bytes"] for d in r["devices"]))
    others = max(d["peak_bytes"] for d in r["devices"][1:])
    check("gpu0 excess", abs(r["gpu0_excess"] - d0["peak_bytes"] / others) < 1e-9 and r["gpu0_excess"] > 1.3,
          r["gpu0_excess"])
    check("split", r["split"] == [16, 16, 16, 16] and r["steps"] == 2 and r["out_of_memory"] is None)
    check("timeline", len(r["timeline"]) == 18 and r["timeline"][0]["phase"] == "load")
    check("peak phase is a phase", d0["peak_phase"] in {"load", "scatter", "replicate", "forward", "gather", "loss",
                                                         "backward", "reduce", "update"}, d0["peak_phase"])
    root = ET.parse(svg).getroot()
    check("svg", root.tag.endswith("svg") and "device 0" in open(svg).read() and len(list(root.iter())) > 50)
    t = json.load(open(trace))["traceEvents"]
    check("trace counters", any(e["ph"] == "C" for e in t) and any(e["ph"] == "X" and e["tid"] == 0 for e in t))

    # The remedy that keeps the batch: 4 micro-batches of 128 fit where one batch of 512 did not,
    # in a micro-batch's memory plus one more gradient buffer on device 0.
    def device0(*args):
        p = memprof("--model", "convnet", "--devices", "host:4", "--json", js, *args)
        check(f"memprof {' '.join(args)}", p.returncode == 0, p.stderr)
        return json.load(open(js))
    whole, micro, acc = device0("--batch", "512"), device0("--batch", "128"), device0("--batch", "128", "--accumulate", "4")
    at = lambda r, what: r["devices"][0]["at_peak"][what]
    check("accumulate: in the report", acc["accumulate"] == 4 and acc["split"] == [128] * 4, acc["split"])
    check("accumulate: device 0 a micro-batch's peak plus a gradient buffer",
          acc["devices"][0]["peak_bytes"] == micro["devices"][0]["peak_bytes"] + at(micro, "gradients") and
          at(acc, "gradients") == 2 * at(micro, "gradients"), (acc["devices"][0], micro["devices"][0]))
    check("accumulate: under 0.3x the whole batch's", acc["devices"][0]["peak_bytes"] < 0.3 * whole["devices"][0]["peak_bytes"])
    p = memprof("--model", "convnet", "--devices", "host:4", "--batch", "512", "--device-memory", "12MiB")
    q = memprof("--model", "convnet", "--devices", "host:4", "--batch", "128", "--accumulate", "4", "--device-memory", "12MiB")
    check("accumulate: fits where the whole batch runs out of memory", p.returncode == 3 and q.returncode == 0,
          (p.returncode, q.returncode, q.stderr[-300:]))
    check("--accumulate 0", memprof("--accumulate", "0").returncode == 2)
    # A small gpu0:K share puts device 0 below the others: the table says by how much less.
    p = memprof("--model", "convnet", "--devices", "host:4", "--split", "gpu0:4", "--json", js)
    r = json.load(open(js))
    less = r["devices"][0]["peak_bytes"] < max(d["peak_bytes"] for d in r["devices"][1:])
    check("gpu0:4: device 0 below the others, said as less", p.returncode == 0 and less and
          " less)" in p.stdout and "-" not in p.stdout.split("gpu0 excess")[1].splitlines()[0], p.stdout[-300:])
    p = memprof("--model", "mlp", "--devices", "host:2", "--accumulate", str(10 ** 17))
    check("--accumulate beyond the data: a step of all of it, said", p.returncode == 0 and
          "so a step takes those" in p.stdout, (p.returncode, p.stdout[:400], p.stderr[-300:]))
    rc, out, err = CLI.run(["train", "--model", "mlp", "--devices", "host:2", "--batch", "16", "--generated-size", "100",
                            "--accumulate", str(2 ** 63 - 1), "--steps", "3", "--epochs", "2"])
    check("train --accumulate beyond an epoch: a step an epoch", rc == 0 and "trained 2 steps, 200 samples" in out,
          (rc, out, err[-300:]))

    # --recompute blocks (activation checkpointing): each replica keeps its blocks' inputs only, so
    # the activations shrink (a GPT's most: its blocks hold nearly all of them), and a batch that ran
    # out of memory fits.
    def report(*args):
        p = memprof("--json", js, *args)
        check(f"memprof {' '.join(args)}", p.returncode == 0, p.stderr)
        return json.load(open(js)), p.stdout
    gpt = ["--model", "gpt", "--devices", "host:2", "--batch", "8", "--context", "64", "--gpt-layers", "6",
           "--gpt-dim", "64", "--gpt-heads", "4"]
    (plain, _), (recomputed, out) = report(*gpt), report(*gpt, "--recompute", "blocks")
    (some, some_out) = report(*gpt, "--recompute", "blocks:3")
    act = lambda r, d: r["devices"][d]["peak_by_category"]["activations"]
    check("recompute: in the report", plain["recompute"] == "off" and recomputed["recompute"] == "blocks" and
          plain["recomputed_blocks"] == 0 and recomputed["recomputed_blocks"] == 6 and
          "recompute every block (6): " in out, out[:400])
    check("recompute blocks:3: half of the blocks, half way", some["recomputed_blocks"] == 3 and
          "recompute the first 3 of 6 blocks: " in some_out and
          all(act(recomputed, d) < act(some, d) < act(plain, d) for d in (0, 1)),
          [(act(plain, d), act(some, d), act(recomputed, d)) for d in (0, 1)])
    p = memprof(*gpt, "--recompute", "blocks:7")
    check("recompute: more blocks than the model has", p.returncode == 2 and
          "--recompute blocks:7: --model gpt has 6 blocks" in p.stderr, p.stderr)
    check("recompute: a GPT replica's activations under 0.4x", all(act(recomputed, d) < 0.4 * act(plain, d) for d in (0, 1)),
          [(act(plain, d), act(recomputed, d)) for d in (0, 1)])
    check("recompute: only activations change", all(
        plain["devices"][d]["peak_by_category"][c] == recomputed["devices"][d]["peak_by_category"][c]
        for d in (0, 1) for c in ("parameters", "gradients", "optimizer", "gathered outputs")))
    resnet = ["--model", "resnet8", "--devices", "host:2", "--batch", "64", "--device-memory", "24MiB"]
    p, q = memprof(*resnet), memprof(*resnet, "--recompute", "blocks")
    check("recompute: fits where the batch ran out of memory", p.returncode == 3 and q.returncode == 0,
          (p.returncode, q.returncode, q.stderr[-300:]))
    check("remedies: recompute", "--recompute blocks" in p.stderr, p.stderr)
    p = memprof("--model", "convnet", "--recompute", "blocks")
    check("recompute: a model without blocks", p.returncode == 2 and
          "--model convnet has no blocks to recompute (resnet18, resnet8, gpt have)" in p.stderr, p.stderr)
    for bad in ("everything", "blocks:0", "blocks:", "blocks:two", "blocks:-1"):
        p = memprof("--recompute", bad)
        check(f"recompute: a bad value {bad}", p.returncode == 2 and
              f"--recompute must be off, blocks or blocks:N with N >= 1, not '{bad}'" in p.stderr, p.stderr)

    # Out of memory on device 0: exit 3, the message, the remedies, the report for what was measured.
    # (The second step's forward: the first step's update made the optimizer state.)
    os.remove(js)
    p = memprof("--model", "mlp", "--devices", "host:4", "--batch", "512", "--device-memory", "8MiB", "--json", js)
    check("oom exit 3", p.returncode == 3, (p.returncode, p.stderr))
    check("oom message", "device 0 (host:0) ran out of memory trying to allocate" in p.stderr and
          "of 8.00 MiB in use (" in p.stderr and "during forward" in p.stderr, p.stderr)
    check("remedies", "remedies, each planned" in p.stderr and "balance-memory" in p.stderr and "in-replica" in p.stderr)
    check("remedies: accumulation", "--batch 256 --accumulate 2 " in p.stderr, p.stderr)
    r = json.load(open(js))
    check("report written", r["out_of_memory"] is not None and r["out_of_memory"]["device"] == 0 and
          r["out_of_memory"]["request_bytes"] > 0, r.get("out_of_memory"))

    # The remedies are this run's: only those that apply to its model and mode, each planned, and
    # each verdict true when memprof runs the same step with that change.
    def remedies(stderr):
        return [(m.group(1).strip(), m.group(2)) for m in
                re.finditer(r"^  (--\S.*?)\s+(fits|still out of memory)", stderr, re.M)]
    failing = [["--model", "convnet", "--devices", "host:4", "--batch", "64", "--device-memory", "3.8MiB"],
               ["--model", "mlp", "--devices", "host:4", "--batch", "512", "--device-memory", "8MiB"],
               ["--model", "resnet8", "--devices", "host:2", "--batch", "64", "--device-memory", "24MiB"],
               ["--model", "gpt", "--gpt-layers", "2", "--gpt-dim", "64", "--gpt-heads", "2", "--context", "32",
                "--devices", "host:2", "--batch", "16", "--optimizer", "adamw", "--device-memory", "3MiB"]]
    for args in failing:
        p = memprof(*args)
        found = remedies(p.stderr)
        name = " ".join(args[:2])
        check(f"remedies of {name}: out of memory, each remedy planned", p.returncode == 3 and len(found) >= 3,
              (p.returncode, p.stderr[-1500:]))
        flags = [f for f, _ in found]
        check(f"remedies of {name}: --recompute only for a model with blocks",
              ("--recompute blocks" in flags) == (args[1] != "convnet" and args[1] != "mlp"), flags)
        check(f"remedies of {name}: nothing memprof cannot change", not any("upload-ahead" in f for f in flags), flags)
        check(f"remedies of {name}: no pointer to memprof inside memprof", "dp memprof with the same" not in p.stderr)
        for flag, verdict in found:
            q = memprof(*args, *flag.split())
            want = 0 if verdict == "fits" else 3
            check(f"remedies of {name}: '{flag}' {verdict}, and memprof agrees", q.returncode == want,
                  (q.returncode, q.stderr[-600:]))
    p = memprof(*failing[0], "--loss", "in-replica")
    check("remedies: --loss in-replica not offered when it is the loss already",
          p.returncode == 3 and "--loss in-replica" not in [f for f, _ in remedies(p.stderr)], p.stderr[-800:])

    # Remedies work: in-replica loss and balance-memory lower device 0's peak.
    def peaks(model, *extra):
        p = memprof("--model", model, "--devices", "host:4", "--batch", "256", "--json", js, *extra)
        check("runs " + " ".join(extra), p.returncode == 0, p.stderr)
        return [d["peak_bytes"] for d in json.load(open(js))["devices"]]
    check("in-replica lowers device 0", peaks("mlp", "--loss", "in-replica")[0] < peaks("mlp")[0])
    # The convnet's peaks are activations, which follow the chunks: balancing lowers the largest.
    check("balance-memory lowers the largest peak", max(peaks("convnet", "--split", "balance-memory")) <
          max(peaks("convnet")))

    for bad, needle in [("lots", "--device-memory 'lots'"), ("-1GiB", "positive"), ("5 parsecs", "unknown unit")]:
        p = memprof("--device-memory", bad)
        check(f"bad size {bad}", p.returncode == 2 and needle in p.stderr, p.stderr)
    p = memprof("--loss", "everywhere")
    check("bad loss", p.returncode == 2 and "--loss 'everywhere'" in p.stderr, p.stderr)
    p = subprocess.run([DP, "train", "--model", "mlp", "--devices", "host:2", "--steps", "2", "--batch", "16",
                        "--device-memory", "1MiB"], capture_output=True, text=True, timeout=120)
    check("train oom exit 3", p.returncode == 3 and "ran out of memory" in p.stderr and "remedies" in p.stderr,
          (p.returncode, p.stderr))

CLI.finish()
