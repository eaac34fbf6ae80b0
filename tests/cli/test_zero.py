"""--sync zero1|zero2|zero3 from the command line: the weights --sync allreduce trains (zero1 bit for
bit), checkpoints that resume under the same stage bit for bit and under any other shape, memprof's
device-0 peak against allreduce's on a GPT whose model states dominate, the demo's narration of the
reduce-scatter and all-gather with the bytes on each link, mpirun -np 2 x host:2 against one process's
host:4 for every stage, and the flags ZeRO refuses.

usage: test_zero.py DP_BINARY
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli, mnist_like_dir, weights  # noqa: E402

CLI = Cli()
check, run, expect = CLI.check, CLI.run, CLI.expect
STAGES = ("zero1", "zero2", "zero3")


def worst(a_path, b_path):
    a, b = weights(a_path), weights(b_path)
    if set(a) != set(b):
        return float("inf")
    return max(max(abs(x - y) / max(1.0, abs(y)) for x, y in zip(a[k], b[k])) for k in a)


def same_file(a, b):
    return open(a, "rb").read() == open(b, "rb").read()


with tempfile.TemporaryDirectory() as tmp:
    data = mnist_like_dir(tmp, 96, 16)
    # A tame learning rate, so that rounding differences (zero2 and zero3 sum in another order on
    # three devices) are not amplified through BatchNorm from step to step.
    base = ["train", "--data", data, "--devices", "host:3", "--batch", "16", "--model", "convnet", "--split",
            "chunks:3,8,5", "--epochs", "2", "--optimizer", "sgd", "--lr", "0.002", "--momentum", "0", "--bucket-mb",
            "0.02"]
    gpt = ["train", "--model", "gpt", "--gpt-layers", "2", "--gpt-dim", "32", "--gpt-heads", "2", "--context", "16",
           "--devices", "host:3", "--batch", "6", "--steps", "6", "--clip-grad-norm", "0.5", "--bucket-mb", "0.02"]

    # ---- the weights --sync allreduce trains
    for name, args in (("convnet", base), ("gpt", gpt)):
        ddp = os.path.join(tmp, f"{name}-ddp.st")
        rc, _, err = run(args + ["--sync", "allreduce", "--save", ddp])
        check(f"{name}: allreduce runs", rc == 0, err)
        for stage in STAGES:
            st, m = os.path.join(tmp, f"{name}-{stage}.st"), os.path.join(tmp, f"{name}-{stage}.jsonl")
            rc, out, err = run(args + ["--sync", stage, "--save", st, "--metrics", m])
            check(f"{name} {stage} runs", rc == 0, err)
            if rc != 0:
                continue
            if stage == "zero1":
                check(f"{name} zero1: allreduce's weights bit for bit", same_file(st, ddp))
            else:
                check(f"{name} {stage}: allreduce's weights within float tolerance", worst(st, ddp) < 1e-3,
                      worst(st, ddp))
            check(f"{name} {stage}: the header names the shape", f"--sync {stage})" in err, err)

    # ---- checkpoints: whole (torch's names), resumed bit for bit under the same stage, and under others
    ck = os.path.join(tmp, "ck")
    whole = os.path.join(tmp, "whole.st")
    run(base + ["--sync", "zero3", "--save", whole])
    rc, _, err = run(base + ["--sync", "zero3", "--checkpoint", ck, "--checkpoint-every", "5", "--steps", "5"])
    check("zero3 --checkpoint", rc == 0 and os.path.isdir(ck), err)
    resumed = os.path.join(tmp, "resumed.st")
    rc, _, err = run(base + ["--sync", "zero3", "--resume", ck, "--save", resumed])
    check("zero3 resumed: the uninterrupted run's weights bit for bit", rc == 0 and same_file(resumed, whole), err)
    for other in ("allreduce", "zero1", "reduce"):
        st = os.path.join(tmp, f"resumed-{other}.st")
        args = base + ["--sync", other, "--resume", ck, "--save", st]
        rc, _, err = run(args)
        check(f"a zero3 checkpoint resumes under --sync {other}", rc == 0 and worst(st, whole) < 1e-3, err)

    # ---- memprof: device 0's peak against allreduce's on a GPT whose parameters, gradients and AdamW
    # state dominate (4 layers, dim 256, vocabulary 8192, batch 4, context 32, 2 MiB buckets, host:4)
    big = ["memprof", "--model", "gpt", "--gpt-layers", "4", "--gpt-dim", "256", "--vocab", "8192", "--batch", "4",
           "--context", "32", "--devices", "host:4", "--optimizer", "adamw", "--bucket-mb", "2"]
    peaks = {}
    for mode in ("allreduce",) + STAGES:
        js = os.path.join(tmp, f"memprof-{mode}.json")
        rc, out, err = run(big + ["--sync", mode, "--json", js])
        check(f"memprof --sync {mode}", rc == 0, err)
        if rc == 0:
            report = json.load(open(js))
            peaks[mode] = report["devices"][0]["peak_bytes"]
            if mode == "zero3":
                check("memprof zero3: gathered parameters at the peak",
                      report["devices"][0]["at_peak"]["gathered parameters"] > 0, report["devices"][0])
    for stage, limit in (("zero1", 0.70), ("zero2", 0.55), ("zero3", 0.45)):
        if "allreduce" in peaks and stage in peaks:
            ratio = peaks[stage] / peaks["allreduce"]
            check(f"memprof {stage}: device 0 peaks at <= {limit}x allreduce's", ratio <= limit, ratio)

    # ---- the demo narrates the reduce-scatter and the all-gather, with the bytes on each link
    for stage in STAGES:
        js = os.path.join(tmp, f"demo-{stage}.json")
        rc, out, err = run(["demo", "--devices", "host:3", "--batch", "10", "--sync", stage, "--json", js])
        check(f"demo --sync {stage}", rc == 0, err)
        check(f"demo {stage}: reduce-scatter, each device's part, DDP's and DataParallel's bytes",
              "reduce-scatter" in out and "1/3 part" in out and "DDP's all-reduce moves" in out
              and "DataParallel's reduce" in out, out)
        check(f"demo {stage}: the ring's links (d0 --[...]--> d1)", "d0 --[" in out and "--> d1" in out, out)
        gathers = "all-gathers the new parameters" in out if stage != "zero3" else "ring all-gathers them" in out
        check(f"demo {stage}: the all-gather", gathers, out)
        if rc == 0:
            phases = json.load(open(js))["steps"][0]["phases"]
            moved = sum(t["bytes"] for p in phases for t in p["transfers"] if t["from"] != "host")
            check(f"demo {stage}: the JSON counts the ring's bytes", moved > 0, phases)

    # ---- refused, by name, exit 2
    expect("--sync zero4", base + ["--sync", "zero4"], 2, "zero1, zero2, zero3")
    expect("zero2 with --loss gathered", base + ["--sync", "zero2", "--loss", "gathered"], 2,
           "--sync zero2 computes the loss in each replica")
    expect("zero3 with --split balance-memory", base + ["--sync", "zero3", "--split", "balance-memory"], 2,
           "--sync zero3 has none")

    # ---- mpirun -np 2 x host:2 against one process's host:4, for every stage
    mpirun = shutil.which("mpirun")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    if mpirun:
        mpi = ["train", "--model", "mlp", "--data", data, "--optimizer", "adamw", "--lr", "0.002", "--epochs", "1",
               "--bucket-mb", "0.2"]
        for stage in STAGES:
            one, many = os.path.join(tmp, f"one-{stage}.st"), os.path.join(tmp, f"many-{stage}.st")
            many_ck = os.path.join(tmp, f"many-ck-{stage}")
            rc, _, err = run(mpi + ["--sync", stage, "--devices", "host:4", "--batch", "32", "--save", one])
            check(f"{stage}: one process host:4", rc == 0, err)
            p = subprocess.run([mpirun, "-np", "2", CLI.dp] + mpi + ["--sync", stage, "--devices", "host:2", "--batch",
                                                                     "16", "--save", many, "--checkpoint", many_ck],
                               capture_output=True, text=True, errors="replace", env=env, timeout=300)
            if "built without MPI" in p.stderr:
                break
            check(f"{stage}: mpirun -np 2 x host:2", p.returncode == 0, p.stderr)
            if p.returncode == 0 and rc == 0:
                check(f"{stage} -np 2: one process's weights", worst(many, one) < 1e-4, worst(many, one))
                # The checkpoint holds every process's parts: it resumes under another shape.
                again = os.path.join(tmp, f"again-{stage}.st")
                p = subprocess.run([mpirun, "-np", "2", CLI.dp] + mpi[:-2] + ["--epochs", "2", "--sync", "allreduce",
                                                                            "--devices", "host:2", "--batch", "16",
                                                                            "--resume", many_ck, "--save", again],
                                   capture_output=True, text=True, errors="replace", env=env, timeout=300)
                check(f"{stage} -np 2: its checkpoint resumes under allreduce", p.returncode == 0
                      and "resuming from" in p.stderr and os.path.exists(again), p.stderr)

CLI.finish()
