"""Training across processes: `mpirun -np P dp train --sync allreduce` with host:1 each equals one
process with host:P (per-step losses, final weights) — in bf16 and fp16 (loss scale, skipped steps)
bitwise, and the GPT with dropout (with and without accumulation); rank 0 alone writes; a command
line that differs between ranks, an error on one rank alone and a rank killed mid-run end the job
with an error in bounded time; dp train without --sync allreduce, and memprof, are refused under
mpirun. Skipped (exit 77) without mpirun or without MPI in this build.

usage: test_mpi.py DP_BINARY
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks, losses, weights, write_mnist_like  # noqa: E402

dp = os.path.abspath(sys.argv[1])
mpirun = shutil.which("mpirun")
if not mpirun:
    print("SKIP: no mpirun (apt-get install openmpi-bin)")
    sys.exit(77)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
c = Checks()


def run(args, timeout=240):
    t0 = time.monotonic()
    p = subprocess.run([mpirun] + args, capture_output=True, text=True, errors="replace", env=env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    write_mnist_like(data, "train", 200)
    write_mnist_like(data, "t10k", 20)
    base = ["--data", data, "--model", "mlp", "--sync", "allreduce", "--optimizer", "adamw", "--lr", "0.002",
            "--epochs", "2"]
    rc, out, err, _ = run(["-np", "1", dp, "train"] + base + ["--devices", "host:1", "--batch", "8", "--steps", "1"])
    if "built without MPI" in err:
        print("SKIP: this dp was built without MPI")
        sys.exit(77)
    c.check("one rank runs", rc == 0, err)

    for procs in (2, 4):
        one_m, one_st = os.path.join(tmp, f"one{procs}.jsonl"), os.path.join(tmp, f"one{procs}.st")
        many_m, many_st = os.path.join(tmp, f"many{procs}.jsonl"), os.path.join(tmp, f"many{procs}.st")
        many_trace = os.path.join(tmp, f"many{procs}-trace.json")
        p = subprocess.run([dp, "train"] + base + ["--devices", f"host:{procs}", "--batch", str(8 * procs), "--metrics",
                                                   one_m, "--save", one_st], capture_output=True, text=True)
        c.check(f"one process host:{procs}", p.returncode == 0, p.stderr)
        rc, out, err, _ = run(["-np", str(procs), dp, "train"] + base + ["--devices", "host:1", "--batch", "8",
                                                                       "--metrics", many_m, "--save", many_st, "--eval",
                                                                       "--eval-every", "5", "--trace", many_trace,
                                                                       "--trace-steps", "2:3"])
        c.check(f"mpirun -np {procs}", rc == 0, err)
        if rc != 0 or p.returncode != 0:
            continue
        a, b = losses(one_m), losses(many_m)
        steps = 2 * -(-200 // (8 * procs))  # two epochs of the global batch
        c.check(f"-np {procs}: the same steps", len(a) == len(b) == steps, (len(a), len(b)))
        c.check(f"-np {procs}: the same losses", all(abs(x - y) <= 1e-5 * max(1, abs(x)) for x, y in zip(a, b)), (a, b))
        wa, wb = weights(one_st), weights(many_st)
        worst = max(max(abs(x - y) for x, y in zip(wa[k], wb[k])) for k in wa)
        c.check(f"-np {procs}: the same weights", set(wa) == set(wb) and worst < 1e-4, worst)
        # Each epoch's end and every 5th step but those (rank 0 evaluates; the others wait at the next step).
        evals = 2 + sum(1 for s in range(1, steps + 1) if s % 5 == 0 and s % (steps // 2) != 0)
        c.check(f"-np {procs}: rank 0 alone reports", err.count("dp train:") == 1 and out.count("test accuracy") == evals,
                out + err)
        c.check(f"-np {procs}: the header names the processes", f"in each of {procs} processes" in err, err)
        c.check(f"-np {procs}: rank 0 writes the trace", out.count("trace of steps 2-3") == 1
                and json.load(open(many_trace))["traceEvents"], out)

    # Mixed precision across processes. With one sample per rank, DistributedSampler's striding gives
    # rank r the sample that one process's device r holds (perm[2k + r]), so each replica rounds the
    # same 16-bit gradients and the sum of two has no order: bitwise the one-process run — losses,
    # fp16's skipped steps and scales (every rank takes the same verdict), the weights.
    # Gradient accumulation too: every rank takes 3 micro-batches of its shard a step.
    for name, prec, extra in (("bf16", "bf16", []),
                              ("fp16", "fp16", ["--loss-scale", str(2 ** 30), "--loss-scale-growth-interval", "4"]),
                              ("fp16 --accumulate 3", "fp16", ["--accumulate", "3", "--clip-grad-norm", "0.5"])):
        one_m, one_st = os.path.join(tmp, f"{name}-one.jsonl"), os.path.join(tmp, f"{name}-one.st")
        many_m, many_st = os.path.join(tmp, f"{name}-many.jsonl"), os.path.join(tmp, f"{name}-many.st")
        flags = base[:-2] + ["--epochs", "1", "--steps", "30", "--precision", prec] + extra
        p = subprocess.run([dp, "train"] + flags + ["--devices", "host:2", "--batch", "2", "--metrics", one_m, "--save",
                                                    one_st], capture_output=True, text=True)
        rc, out, err, _ = run(["-np", "2", dp, "train"] + flags + ["--devices", "host:1", "--batch", "1", "--metrics",
                                                                 many_m, "--save", many_st])
        c.check(f"{name} across processes runs", rc == 0 and p.returncode == 0, err + p.stderr)
        if rc != 0 or p.returncode != 0:
            continue
        def steps(path):
            return [(x["loss"], x.get("loss_scale"), x.get("skipped")) for x in map(json.loads, open(path))
                    if "step" in x]
        a, b = steps(one_m), steps(many_m)
        c.check(f"{name} -np 2: step by step the one-process run (loss, scale, skipped)", len(a) == 30 and a == b,
                (a, b))
        c.check(f"{name} -np 2: bitwise the same weights", open(one_st, "rb").read() == open(many_st, "rb").read())
        if name == "fp16":
            c.check("fp16 -np 2: the overflowing scale skipped, then steps ran", a[0][2] and not a[-1][2], a)

    # The GPT's dropout across processes: a window's mask follows its place in the step's whole
    # batch, not the process or micro-batch that takes it, so the job drops what one process on as
    # many devices drops (losses and weights within float rounding of the sums' order).
    for extra in ([], ["--accumulate", "2"]):
        name = " ".join(["--dropout"] + extra)
        one_m, one_st = os.path.join(tmp, "drop-one.jsonl"), os.path.join(tmp, "drop-one.st")
        many_m, many_st = os.path.join(tmp, "drop-many.jsonl"), os.path.join(tmp, "drop-many.st")
        gpt = ["train", "--model", "gpt", "--gpt-layers", "1", "--gpt-dim", "32", "--context", "16",
               "--generated-size", "20000", "--dropout", "0.2", "--sync", "allreduce", "--steps", "6"] + extra
        p = subprocess.run([dp] + gpt + ["--devices", "host:2", "--batch", "4", "--metrics", one_m, "--save", one_st],
                           capture_output=True, text=True)
        rc, out, err, _ = run(["-np", "2", dp] + gpt + ["--devices", "host:1", "--batch", "2", "--metrics", many_m,
                                                      "--save", many_st])
        c.check(f"{name} across processes runs", rc == 0 and p.returncode == 0, err[-2000:] + p.stderr)
        if rc == 0 and p.returncode == 0:
            a, b = losses(one_m), losses(many_m)
            c.check(f"{name} -np 2: the one-process losses",
                    len(a) == len(b) == 6 and all(abs(x - y) <= 1e-5 * max(1, abs(x)) for x, y in zip(a, b)), (a, b))
            wa, wb = weights(one_st), weights(many_st)
            worst = max(max(abs(x - y) for x, y in zip(wa[k], wb[k])) for k in wa)
            c.check(f"{name} -np 2: the one-process weights", set(wa) == set(wb) and worst < 1e-4, worst)

    # --sync-bn across processes: BatchNorm over the job's whole batch, as one device on it.
    one_m, sync_m = os.path.join(tmp, "bn-one.jsonl"), os.path.join(tmp, "bn-sync.jsonl")
    bn = ["--data", data, "--model", "convnet", "--sync", "allreduce", "--lr", "0.01", "--momentum", "0", "--steps",
          "6", "--no-shuffle"]
    p = subprocess.run([dp, "train"] + bn + ["--devices", "host:1", "--batch", "16", "--metrics", one_m],
                       capture_output=True, text=True)
    rc, out, err, _ = run(["-np", "2", dp, "train"] + bn + ["--devices", "host:2", "--batch", "8", "--sync-bn",
                                                          "--split", "chunks:3,5", "--metrics", sync_m])
    c.check("--sync-bn across processes runs", rc == 0 and p.returncode == 0, err + p.stderr)
    if rc == 0 and p.returncode == 0:
        a, b = losses(one_m), losses(sync_m)
        c.check("--sync-bn across 2 processes x 2 devices = one device on the whole batch",
                len(a) == len(b) == 6 and all(abs(x - y) <= 1e-5 * max(1, abs(x)) for x, y in zip(a, b)), (a, b))

    # --recompute blocks across processes, resnet8's BatchNorm meeting its statistics across them
    # (--sync-bn): the job trains bit for bit as without it.
    res = ["train", "--model", "resnet8", "--sync", "allreduce", "--sync-bn", "--devices", "host:1", "--batch", "16",
           "--generated-size", "200", "--steps", "3"]
    saved = {}
    for r in ("off", "blocks"):
        saved[r] = os.path.join(tmp, f"recompute-{r}.st")
        rc, out, err, _ = run(["-np", "2", dp] + res + ["--recompute", r, "--save", saved[r]])
        c.check(f"--recompute {r} across processes runs", rc == 0, err[-2000:])
    c.check("--recompute blocks across processes: bitwise the same weights",
            all(os.path.exists(f) for f in saved.values()) and
            open(saved["off"], "rb").read() == open(saved["blocks"], "rb").read())

    # A rank whose command line differs: every rank stops with the error, nobody hangs.
    rc, out, err, secs = run(["-np", "1", dp, "train"] + base + ["--devices", "host:1", "--batch", "8", ":",
                              "-np", "1", dp, "train"] + base + ["--devices", "host:1", "--batch", "9"], timeout=120)
    c.check("mismatched flags: an error", rc != 0 and "command line differs from rank 0's" in err, err)
    c.check("mismatched flags: quickly", secs < 60, secs)

    # An error on one rank alone (only rank 0 writes --metrics): the job ends, the others do not wait
    # for it in their next collective (an exit that finalised MPI used to hang the job there).
    rc, out, err, secs = run(["-np", "2", dp, "train"] + base + ["--devices", "host:1", "--batch", "8", "--metrics",
                                                               os.path.join(tmp, "missing", "m.jsonl")], timeout=120)
    c.check("an error on rank 0 alone: the job fails with it", rc == 2 and "--metrics" in err, (rc, err[-2000:]))
    c.check("an error on rank 0 alone: quickly", secs < 60, secs)

    # A rank killed mid-run: the job ends with an error in bounded time.
    long_run = base + ["--devices", "host:1", "--batch", "8", "--epochs", "100000"]
    rc, out, err, secs = run(["-np", "1", dp, "train"] + long_run + [":", "-np", "1", "timeout", "-s", "KILL", "4", dp,
                                                                   "train"] + long_run, timeout=180)
    c.check("killed rank: the job fails", rc != 0, (rc, err[-2000:]))
    c.check("killed rank: within a bounded time", secs < 120, secs)

    rc, out, err, _ = run(["-np", "2", dp, "train", "--data", data, "--model", "mlp", "--devices", "host:1", "--steps",
                           "1"])
    c.check("mpirun without --sync allreduce: refused", rc != 0 and "add --sync allreduce" in err, err)
    rc, out, err, _ = run(["-np", "1", dp, "memprof", "--model", "mlp", "--devices", "host:2"])
    c.check("memprof under mpirun: refused", rc != 0 and "run it without mpirun" in err, err)

    # GPU processes (only where a GPU is): NCCL over the ranks, each on its local rank's GPU
    # (--devices auto). One rank equals one process on cuda:0 (NCCL's sum over one rank is the
    # identity), bit for bit; two ranks on one GPU end quickly.
    listing = subprocess.run([dp, "devices"], capture_output=True, text=True).stdout
    if "CUDA: no GPU" in listing or "cuda" not in listing.lower():
        print("GPU processes: no GPU here, not run")
    else:
        gpu_a, gpu_b = os.path.join(tmp, "gpu-one.jsonl"), os.path.join(tmp, "gpu-rank.jsonl")
        gpu = base[:-2] + ["--epochs", "1", "--steps", "5", "--batch", "16"]
        p = subprocess.run([dp, "train"] + gpu + ["--devices", "cuda:0", "--metrics", gpu_a], capture_output=True,
                           text=True)
        rc, out, err, _ = run(["-np", "1", dp, "train"] + gpu + ["--devices", "auto", "--metrics", gpu_b])
        c.check("one GPU process under mpirun (NCCL) runs", rc == 0 and p.returncode == 0, err + p.stderr)
        c.check("it takes its local rank's GPU", "local rank 0" in err, err)
        if rc == 0 and p.returncode == 0:
            c.check("one GPU rank through NCCL = one process on cuda:0, bit for bit", losses(gpu_a) == losses(gpu_b),
                    (losses(gpu_a), losses(gpu_b)))
        rc, out, err, secs = run(["-np", "2", dp, "train"] + gpu + ["--devices", "auto"], timeout=180)
        # NCCL has long refused two ranks on one GPU ("Duplicate GPU detected"); if this version runs
        # them, they must still train; either way the job ends, and an error names NCCL.
        print(f"two GPU ranks on one GPU: exit {rc}")
        c.check("two GPU ranks on one GPU: trains, or an error naming NCCL", rc == 0 or "NCCL" in err, err[-2000:])
        c.check("two GPU ranks on one GPU: ends quickly", secs < 120, secs)
c.finish()
