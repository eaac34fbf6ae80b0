"""dp plan on meta devices: its report equals dp memprof's on host devices, field by field and byte
for byte (each device's peak, the phase of the peak, what was in use then, the peak per category,
the per-phase timeline, the out-of-memory point), over models x strategies x splits x precisions,
with accumulation, recomputation, AdamW and capacities; --compare's rows and --max-batch's answer;
a GPT-2-sized plan; and the inputs it refuses.

usage: test_plan.py DP_BINARY
"""
import itertools
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli  # noqa: E402

CLI = Cli()
check, run, expect = CLI.check, CLI.run, CLI.expect


def report(command, devices, args, tmp):
    path = os.path.join(tmp, "r.json")
    rc, out, err = run([command, "--devices", devices, "--json", path] + args)
    if rc not in (0, 3):
        return None, err
    if not os.path.exists(path):  # out of memory before the first step: the error alone
        return (rc, err.replace("meta:", "host:").replace("dp plan", "dp memprof")), None
    d = json.load(open(path))
    os.remove(path)
    devs = [{k: v for k, v in x.items() if k != "name"} for x in d["devices"]]
    oom = d["out_of_memory"] and {k: v for k, v in d["out_of_memory"].items() if k != "message"}
    return (rc, devs, d["timeline"], d["split"], oom, d["steps"]), None


with tempfile.TemporaryDirectory() as tmp:
    # ---- the same report as memprof's on host devices
    models = [["--model", "mlp"], ["--model", "convnet"], ["--model", "resnet8"],
              ["--model", "gpt", "--gpt-layers", "2", "--gpt-dim", "32", "--gpt-heads", "2", "--context", "16"]]
    syncs = [["--sync", "reduce"], ["--sync", "reduce", "--loss", "in-replica"],
             ["--sync", "allreduce", "--bucket-mb", "0.05"], ["--sync", "zero1", "--bucket-mb", "0.05"],
             ["--sync", "zero2", "--bucket-mb", "0.05"], ["--sync", "zero3", "--bucket-mb", "0.05"]]
    splits = [["--split", "even"], ["--split", "chunks:1,5,2"]]
    precisions = [["--precision", "fp32"], ["--precision", "bf16"]]
    cases = [m + s + sp + p + ["--batch", "8"] for m, s, sp, p in itertools.product(models, syncs, splits, precisions)]
    cases += [["--model", "convnet", "--batch", "8", "--accumulate", "3", "--sync", sync]
              for sync in ("reduce", "allreduce", "zero2")]
    cases += [["--model", m, "--batch", "6", "--recompute", "blocks", "--optimizer", "adamw", "--precision", "fp16",
               "--sync", sync] for m in ("resnet8", "gpt") for sync in ("reduce", "zero3")]
    # Out of memory at different points: every device (DataParallel's replicas do not wait for each
    # other), or device 0 alone (ZeRO-3's devices meet in every gather: the others stop at the next one).
    cases += [["--model", "convnet", "--batch", "24", "--device-memory", mem] for mem in ("400KiB", "1MiB")]
    cases += [["--model", "convnet", "--batch", "24", "--split", "chunks:12,8,4", "--device-memory", "2.5MiB",
               "--sync", sync, "--bucket-mb", "0.05"] for sync in ("reduce", "allreduce", "zero3")]
    cases += [["--model", "convnet", "--batch", "16", "--sync", "allreduce", "--sync-bn"],
              ["--model", "mlp", "--batch", "8", "--split", "balance-memory", "--device-memory", "2MiB"],
              ["--model", "mlp", "--batch", "2", "--split", "even"]]  # fewer chunks than devices
    differ = []
    for args in cases:
        a, err_a = report("memprof", "host:3", args, tmp)
        b, err_b = report("plan", "meta:3", args, tmp)
        if a is None or b is None or a != b:
            differ.append((" ".join(args), err_a or err_b))
    check(f"plan on meta:3 equals memprof on host:3 in {len(cases)} cases", not differ, differ[:3])

    # ---- the table names the devices, the out-of-memory exits 3 as memprof's does
    rc, out, err = run(["plan", "--devices", "meta:4", "--model", "convnet", "--batch", "64", "--device-memory",
                        "3.8MiB"])
    check("plan: out of memory exits 3 with the error and remedies", rc == 3 and "ran out of memory" in err
          and "meta:" in err, err)
    rc, out, err = run(["plan", "--model", "mlp", "--batch", "16"])
    check("plan's devices default to meta:2", rc == 0 and "meta:2" in out and "d1" in out, out + err)

    # ---- --compare: every strategy, fp32 and bf16, recompute where the model has blocks
    js = os.path.join(tmp, "compare.json")
    rc, out, err = run(["plan", "--devices", "meta:4", "--model", "gpt", "--gpt-layers", "2", "--gpt-dim", "64",
                        "--gpt-heads", "2", "--context", "32", "--vocab", "4096", "--batch", "8", "--bucket-mb", "0.25",
                        "--compare", "--device-memory", "64MiB", "--json", js])
    check("plan --compare runs", rc == 0, err)
    if rc == 0:
        rows = json.load(open(js))["compare"]
        names = [r["strategy"] for r in rows]
        check("--compare: 24 rows (6 strategies x fp32/bf16 x recompute or not)", len(rows) == 24, names)
        by = {r["strategy"]: r for r in rows}
        for name in ("DataParallel", "DataParallel, in-replica loss", "DDP (allreduce)", "ZeRO-1", "ZeRO-2", "ZeRO-3",
                     "ZeRO-3, bf16, recompute"):
            check(f"--compare: a row for {name}", name in by and name in out, names)
        if all(n in by for n in ("DDP (allreduce)", "ZeRO-1", "ZeRO-2", "ZeRO-3")):
            ddp, z = by["DDP (allreduce)"], [by[f"ZeRO-{k}"] for k in (1, 2, 3)]
            check("--compare: ZeRO's device 0 below DDP's, stage by stage",
                  ddp["device0_peak_bytes"] > z[0]["device0_peak_bytes"] > z[1]["device0_peak_bytes"]
                  > z[2]["device0_peak_bytes"], [r["device0_peak_bytes"] for r in [ddp] + z])
            check("--compare: DDP and ZeRO-1 send the same bytes, ZeRO-3 1.5x them",
                  ddp["device0_sends_bytes"] == z[0]["device0_sends_bytes"]
                  and abs(z[2]["device0_sends_bytes"] / z[0]["device0_sends_bytes"] - 1.5) < 0.01, rows[:1])
            check("--compare: DataParallel's device 0 holds the most", by["DataParallel"]["device0_peak_bytes"]
                  == max(r["device0_peak_bytes"] for r in rows if r["precision"] == "fp32" and r["recompute"] == "off"))
            check("--compare: each row's report is memprof's schema", all("timeline" in r["report"] for r in rows))
        check("--compare: the verdict against the capacity", "fits," in out and "spare" in out, out)

    # ---- --max-batch: the answer fits, one more does not
    base = ["plan", "--devices", "meta:2", "--model", "mlp", "--device-memory", "16MiB"]
    rc, out, err = run(base + ["--batch", "8", "--max-batch"])
    check("plan --max-batch runs", rc == 0 and "max batch:" in out, out + err)
    if rc == 0:
        best = int(out.split("max batch:")[1].split()[0])
        fits, _, _ = run(base + ["--batch", str(best)])
        over, _, _ = run(base + ["--batch", str(best + 1)])
        check(f"--max-batch {best}: it fits, {best + 1} does not", fits == 0 and over == 3, (fits, over))

    # ---- a GPT-2-sized plan on meta:8 (the figures are tools/bench/bench_plan.py's)
    rc, out, err = run(["plan", "--model", "gpt", "--gpt-layers", "12", "--gpt-heads", "12", "--gpt-dim", "768",
                        "--context", "1024", "--vocab", "50304", "--optimizer", "adamw", "--devices", "meta:8",
                        "--batch", "64", "--device-memory", "80GiB"])
    check("GPT-2 small on meta:8 at batch 64 plans", rc == 0 and "d7" in out and "GiB" in out, out + err)

    # ---- a plan draws no data: meta devices take shapes only, so a real input size at a large batch
    # holds no pixels (drawn and normalised, these 65,536 samples of 3x224x224 would take 49 GiB)
    big = os.path.join(tmp, "big.json")
    with open(big, "w") as f:
        json.dump({"format": "dp-model", "version": 1, "name": "Big", "source": "test_plan.py",
                   "input": {"name": "x", "kind": "image", "shape": [3, 224, 224], "dtype": "float32"},
                   "nodes": [{"name": "flatten", "op": "flatten", "module": "", "inputs": ["x"],
                              "attrs": {"start_dim": 1, "end_dim": -1}, "shape": [150528], "where": ""},
                             {"name": "fc", "op": "linear", "module": "fc", "inputs": ["flatten"],
                              "attrs": {"in_features": 150528, "out_features": 10, "bias": True}, "shape": [10],
                              "where": ""}],
                   "output": "fc", "state": [{"name": "fc.weight", "shape": [10, 150528], "kind": "parameter"},
                                             {"name": "fc.bias", "shape": [10], "kind": "parameter"}],
                   "loss": {"kind": "cross_entropy"}}, f)
    # (its resident peak read by a fresh process whose only child it is)
    measure = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, 'd7' in p.stdout)")
    p = subprocess.run([sys.executable, "-c", measure, CLI.dp, "plan", "--model", big, "--devices", "meta:8", "--batch",
                        "65536"], capture_output=True, text=True, timeout=300)
    rc, peak_kb, planned = (p.stdout.split() + ["", "", ""])[:3]
    check("a plan at 3x224x224, batch 65536, holds no pixels (under 1 GiB resident)",
          rc == "0" and planned == "True" and int(peak_kb) < 1 << 20, (p.stdout, p.stderr[-500:]))
    # and says what it is doing once it runs past its first second (here, from the start)
    rc, out, err = run(["plan", "--model", big, "--devices", "meta:2", "--batch", "8", "--device-memory", "1GiB",
                        "--max-batch", "--compare"], env={"DP_PLAN_PROGRESS_AFTER": "0"})
    check("--compare --max-batch says which strategy and batch it plans, on stderr",
          rc == 0 and "planning: strategy 1 of " in err and "the largest batch, trying " in err
          and "planning:" not in out, err[-800:])

    # ---- refused, exit 2, by name
    expect("plan on host devices", ["plan", "--devices", "host:2", "--model", "mlp"], 2, "dp memprof")
    expect("meta:0", ["plan", "--devices", "meta:0", "--model", "mlp"], 2, "device count must be")
    rc, out, err = run(["plan", "--help"])
    check("plan --help offers none of the flags it refuses, and says its devices are meta:N",
          rc == 0 and not any(f in out for f in ("--tf32", "--cudnn", "--device-speed")) and "meta:N" in out
          and "cuda:0,1" not in out, out)
    expect("meta with --tf32", ["plan", "--devices", "meta:2", "--tf32"], 2, "--tf32 chooses CUDA's kernels")
    expect("meta with --cudnn", ["plan", "--devices", "meta:2", "--cudnn", "benchmark"], 2, "--cudnn chooses")
    expect("meta with --device-speed", ["plan", "--devices", "meta:2", "--device-speed", "1,0.5"], 2, "--device-speed")
    expect("--split auto on meta", ["plan", "--devices", "meta:2", "--split", "auto"], 2, "run nothing to time")
    expect("--device-memory 0", ["plan", "--device-memory", "0"], 2, "must be a positive size")
    expect("--device-memory -1", ["plan", "--device-memory", "-1"], 2, "must be a positive size")
    expect("--device-memory 1.5", ["plan", "--device-memory", "1.5"], 2, "did you mean 1.5GiB")
    expect("--max-batch without --device-memory", ["plan", "--max-batch"], 2, "give its size with --device-memory")
    expect("--compare with --svg", ["plan", "--compare", "--svg", os.path.join(tmp, "x.svg")], 2, "not --svg or --trace")
    expect("a batch that cannot split", ["plan", "--devices", "meta:3", "--split", "chunks:1,2,3", "--batch", "4"], 2,
           "--split")
    expect("train on meta devices", ["train", "--devices", "meta:2", "--steps", "1"], 2, "plan its memory with dp plan")
    expect("memprof on meta devices", ["memprof", "--devices", "meta:2"], 2, "dp plan")
    expect("demo on meta devices", ["demo", "--devices", "meta:2"], 2, "dp plan")
    rc, out, err = run(["plan", "--device-memory", "80GB", "--model", "mlp"])
    check("80GB means 80 GiB", rc == 0 and "80.00 GiB" in out, out + err)
    for spelling in ("80gb", "80gib", "80Gib", "81920mb"):
        rc, out, err = run(["plan", "--device-memory", spelling, "--model", "mlp"])
        check(f"--device-memory {spelling}: units in any case", rc == 0 and "80.00 GiB" in out, out + err)

CLI.finish()
