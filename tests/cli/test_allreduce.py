"""--sync allreduce from the command line: the same losses as the faithful step, exact resume (every
device's optimizer state restored), memory even across devices in memprof, the demo's narration
of the ring and the trace's all-reduce tracks, and the flags it refuses.

usage: test_allreduce.py DP_BINARY
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli, losses, mnist_like_dir  # noqa: E402

CLI = Cli()
check, run, expect = CLI.check, CLI.run, CLI.expect


with tempfile.TemporaryDirectory() as tmp:
    data = mnist_like_dir(tmp, 96, 16)
    base = ["train", "--data", data, "--devices", "host:3", "--batch", "16", "--model", "convnet", "--split",
            "chunks:3,8,5", "--epochs", "2", "--optimizer", "adamw", "--lr", "0.003"]

    # ---- the same training as the faithful step (BatchNorm included), to float tolerance; a tame
    # learning rate, so rounding differences (the ring sums in another order) are not amplified
    faithful_m, ring_m = os.path.join(tmp, "f.jsonl"), os.path.join(tmp, "r.jsonl")
    tame = base[:-4] + ["--optimizer", "sgd", "--lr", "0.002", "--momentum", "0"]
    rc, _, err = run(tame + ["--metrics", faithful_m])
    check("faithful run", rc == 0, err)
    rc, out, err = run(tame + ["--sync", "allreduce", "--bucket-mb", "0.01", "--metrics", ring_m, "--eval"])
    check("allreduce run", rc == 0 and "test accuracy" in out, err)
    f, r = losses(faithful_m), losses(ring_m)
    check("allreduce: 12 steps", len(r) == 12, r)
    check("allreduce: the faithful step's losses", len(f) == len(r) and
            all(abs(a - b) <= 1e-4 * max(1, abs(a)) for a, b in zip(f, r)), (f, r))

    # ---- exact resume: every device's copy and optimizer state come back
    ck = os.path.join(tmp, "ck")
    whole_st, part_st = os.path.join(tmp, "whole.st"), os.path.join(tmp, "part.st")
    ring = base + ["--sync", "allreduce"]
    rc, _, err = run(ring + ["--checkpoint", ck, "--checkpoint-every", "4", "--keep-checkpoints", "5",
                                    "--save", whole_st])
    check("checkpointed allreduce run", rc == 0, err)
    rc, _, err = run(ring + ["--resume", os.path.join(ck, "step-00000004"), "--save", part_st])
    check("resumed at step 4", rc == 0 and "at step 4" in err, err)
    check("resumed: bitwise the same weights", rc == 0 and open(part_st, "rb").read() == open(whole_st, "rb").read())

    # ---- memprof: no hotspot
    j = os.path.join(tmp, "mp.json")
    rc, out, err = run(["memprof", "--model", "mlp", "--devices", "host:4", "--batch", "64", "--sync",
                               "allreduce", "--json", j])
    check("memprof allreduce", rc == 0, err)
    if rc == 0:
        excess = json.load(open(j))["gpu0_excess"]
        check("memprof allreduce: device 0 within 1.05x of the others", excess <= 1.05, excess)

    # ---- demo: the ring narrated, the all-reduce in the trace
    trace = os.path.join(tmp, "t.json")
    rc, out, err = run(["demo", "--sync", "allreduce", "--model", "mlp", "--bucket-mb", "0.5", "--trace", trace])
    check("demo allreduce", rc == 0 and "ring all-reduce" in out and "No GPU0 hotspot" in out, out + err)
    check("demo allreduce: nothing gathered", "Nothing is gathered" in out and "No loss on device 0" in out, out)
    if rc == 0:
        events = json.load(open(trace))["traceEvents"]
        check("trace: all-reduce slices on their own tracks",
                any(e.get("cat") == "allreduce" for e in events) and
                any(e.get("ph") == "M" and "all-reduce" in str(e.get("args", {}).get("name", "")) for e in events))

    # ---- refused
    expect("allreduce with --loss gathered", base + ["--sync", "allreduce", "--loss", "gathered"], 2,
           "--sync allreduce computes the loss in each replica")
    expect("unknown --sync", base + ["--sync", "ring"], 2, "expected reduce")
    expect("--sync-bn without allreduce", base + ["--sync-bn"], 2, "--sync-bn needs --sync allreduce")
    expect("--bucket-mb 0", base + ["--sync", "allreduce", "--bucket-mb", "0"], 2, "--bucket-mb")
    expect("allreduce with balance-memory", base[:-6] + ["--sync", "allreduce", "--split", "balance-memory"], 2,
           "balance-memory")
CLI.finish()
