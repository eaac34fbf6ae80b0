"""dp train's flags in random combinations (drawn from a fixed seed, so every run tries the same
ones), each checked against a property that must hold for all of them:

- no change to the arithmetic: --cuda-graphs, --upload-ahead and --host-sync change how a step is
  issued, --normalise-on where the pixels are normalised, --device-speed how fast a device runs, --recompute what a replica keeps between forward
  and backward, --eval, --eval-every, --trace and --checkpoint what happens between steps; none
  may change a bit of the per-step losses (and gradient norms,
  fp16's scales and skips) or of the final weights, against --cuda-graphs off --upload-ahead off --host-sync phase;
  in every other case the changed run also has DP_POISON_ALLOCATIONS=1 (each allocation filled with
  NaN first), so a kernel that reads memory nothing wrote shows as a changed bit or a NaN;
- resume: a run resumed from the checkpoint it wrote at step k ends bit for bit as the run that
  went on (and so do its losses from step k);
- two devices: --sync allreduce (each device's sum of the two replicas' gradients) ends bit for bit
  as the faithful step with --loss in-replica (device 0's sum of the same two); without
  --accumulate, where allreduce first sums each device's micro-batches (DDP's no_sync), the faithful
  step each micro-batch's replicas.

The combinations span the model, the device count, --sync, --precision, --split, --loss, the
optimizer, --lr-schedule, clipping, fp16 loss scales that overflow, --sync-bn, gradient
accumulation, the GPT's dropout, and short last batches across epochs. The other tests check each flag on chosen
cases; this one looks for the interactions nobody chose. A failure prints the command lines to
repeat it.

usage: test_combinations.py DP_BINARY [CASES_PER_PROPERTY]
"""
import hashlib
import json
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli  # noqa: E402

CLI = Cli()
CASES = int(sys.argv[2]) if len(sys.argv) > 2 else 14
GPT = ["--context", "16", "--gpt-layers", "1", "--gpt-dim", "32", "--gpt-heads", "2"]


def draw(rng, case):
    """One combination: dp train's arguments, without a step count or outputs."""
    model = rng.choice(["mlp", "convnet", "resnet8", "gpt", "tiny"])
    devices = rng.choice([1, 2, 3, 4])
    sync = rng.choice(["reduce", "allreduce"])
    splits = ["even", "even", "gpu0:1"] + (["balance-memory"] if sync == "reduce" else [])
    split = rng.choice(splits if devices > 1 else ["even"])
    batch = rng.randint(3, 10)
    args = ["train", "--model", model, "--devices", f"host:{devices}", "--sync", sync,
            "--precision", rng.choice(["fp32", "bf16", "fp16"]), "--split", split,
            "--loss", "in-replica" if sync == "allreduce" else rng.choice(["gathered", "in-replica"]),
            "--optimizer", rng.choice(["sgd", "adamw"]), "--batch", str(batch), "--seed", str(case), "--epochs", "6",
            "--lr-schedule", rng.choice(["constant", "cosine", "step:3,0.5"]), "--warmup-steps", str(rng.randint(0, 2))]
    # A generated set of two or three batches, the last one short: epochs end inside the run.
    args += ["--generated-size", "3000"] + GPT if model == "gpt" else ["--generated-size", str(2 * batch + rng.randint(1, batch))]
    if rng.random() < 0.4:
        args += ["--clip-grad-norm", "0.5"]
    if rng.random() < 0.3:
        args += ["--label-smoothing", "0.1"]
    if rng.random() < 0.4:  # parameter groups: the optimizer updates the flat array in runs
        args += ["--weight-decay", rng.choice(["0.01", "0.1"]), "--weight-decay-params", rng.choice(["all", "matrices"])]
    if "fp16" in args and rng.random() < 0.5:  # overflows at first: skipped steps, a halving scale
        args += ["--loss-scale", "1e30", "--loss-scale-growth-interval", "2"]
    if sync == "allreduce" and rng.random() < 0.3:
        args += ["--sync-bn"]
    if rng.random() < 0.3:  # gradient accumulation: fewer steps an epoch, so more epochs
        args += ["--accumulate", str(rng.randint(2, 3))]
        args[args.index("--epochs") + 1] = "12"
    if model == "gpt" and rng.random() < 0.5:  # masks drawn from (seed, step, the sample's place in its step)
        args += ["--dropout", "0.2"]
    return args


def outcome(args, tmp, env=None):
    """Exit code; then per step the loss, gradient norm and fp16's scale and skip (where reported),
    and a hash of the saved weights."""
    metrics, weights = os.path.join(tmp, "m.jsonl"), os.path.join(tmp, "w.safetensors")
    for f in (metrics, weights):
        if os.path.exists(f):
            os.remove(f)
    rc, _, err = CLI.run(args + ["--metrics", metrics, "--save", weights], env=env)
    if rc != 0:
        return rc, err.strip().splitlines()[-1:]
    rows = [json.loads(line) for line in open(metrics) if '"step"' in line]
    steps = [(r["step"], r["loss"], r.get("grad_norm"), r.get("loss_scale"), r.get("skipped")) for r in rows]
    return rc, steps, hashlib.sha256(open(weights, "rb").read()).hexdigest()


def same_arithmetic(rng, case, tmp):
    args = draw(rng, case) + ["--steps", str(rng.randint(5, 9))]
    devices = int(args[args.index("--devices") + 1].split(":")[1])
    usual = args + ["--cuda-graphs", "off", "--upload-ahead", "off", "--host-sync", "phase"]
    ahead = rng.choice(["on", "off"])
    if "balance-memory" in args:  # the next batch on device 0 is memory the plan rightly counts
        ahead = "off"
    other = args + ["--cuda-graphs", rng.choice(["on", "off"]), "--upload-ahead", ahead, "--host-sync", rng.choice(["step", "phase"])]
    if rng.random() < 0.5:
        other += ["--device-speed", ",".join(rng.choice(["1", "0.5"]) for _ in range(devices))]
    if rng.random() < 0.3:
        other += ["--eval"]
    if rng.random() < 0.3:
        other += ["--eval-every", str(rng.randint(1, 3))]
    if rng.random() < 0.2:
        other += ["--trace", os.path.join(tmp, f"trace{case}.json"), "--trace-steps", "1:3"]
    if rng.random() < 0.3:
        other += ["--checkpoint", os.path.join(tmp, f"ck{case}"), "--checkpoint-every", "2"]
    if args[args.index("--model") + 1] in ("resnet8", "gpt") and rng.random() < 0.8:
        other += ["--recompute", rng.choice(["blocks", "blocks:1"])]
    # where pixels are normalised: the loader's threads, or the device that loads the batch (token
    # data has no pixels: auto, which is host); drawn last, so the earlier draws stay as they were
    usual += ["--normalise-on", "host"]
    other += ["--normalise-on", "auto" if args[args.index("--model") + 1] == "gpt" else rng.choice(["device", "host"])]
    poison = {"DP_POISON_ALLOCATIONS": "1"} if case % 2 else {}  # by the case, not the draws: they stay as they were
    a, b = outcome(usual, tmp), outcome(other, tmp, poison)
    CLI.check(f"same arithmetic, case {case}", a[0] == 0 and a == b,
              f"\n  dp {' '.join(usual)}\n  -> {str(a)[:400]}\n  {'DP_POISON_ALLOCATIONS=1 ' if poison else ''}dp "
              f"{' '.join(other)}\n  -> {str(b)[:400]}")


def resume(rng, case, tmp):
    args = draw(rng, case) + ["--cuda-graphs", rng.choice(["on", "off"])]
    steps = rng.randint(6, 11)
    k = rng.randint(1, steps - 1)
    whole = args + ["--steps", str(steps)]
    a = outcome(whole, tmp)
    # The same run again, keeping a checkpoint every k steps: the one at step k stands for an
    # interruption there (the schedule still knows the run's length).
    ck, ck2 = os.path.join(tmp, f"ck{case}"), os.path.join(tmp, f"ck{case}-resumed")
    rc, _, err = CLI.run(whole + ["--checkpoint", ck, "--checkpoint-every", str(k), "--keep-checkpoints", "100"])
    resumed = whole + ["--resume", os.path.join(ck, f"step-{k:08d}"), "--checkpoint", ck2]
    b = outcome(resumed, tmp)
    same = a[0] == 0 and rc == 0 and b[0] == 0 and a[1][k:] == b[1] and a[2] == b[2]
    CLI.check(f"resume, case {case}", same,
              f"\n  dp {' '.join(whole)}\n  -> {str(a)[:400]}\n  checkpointing: exit {rc} {err.strip()[-200:]}"
              f"\n  dp {' '.join(resumed)}\n  -> {str(b)[:400]}")


def two_devices(rng, case, tmp):
    args = draw(rng, case)
    for flag, value in (("--devices", "host:2"), ("--loss", "in-replica"), ("--split", rng.choice(["even", "gpu0:1"]))):
        args[args.index(flag) + 1] = value
    if "--sync-bn" in args:
        args.remove("--sync-bn")
    if "--accumulate" in args:  # allreduce sums each device's micro-batches first (no_sync): another order
        del args[args.index("--accumulate"):args.index("--accumulate") + 2]
    args += ["--steps", str(rng.randint(4, 8))]
    sync = args.index("--sync") + 1
    reduce, allreduce = list(args), list(args)
    reduce[sync], allreduce[sync] = "reduce", "allreduce"
    a, b = outcome(reduce, tmp), outcome(allreduce, tmp)
    CLI.check(f"two devices, case {case}", a[0] == 0 and a == b,
              f"\n  dp {' '.join(reduce)}\n  -> {str(a)[:400]}\n  dp {' '.join(allreduce)}\n  -> {str(b)[:400]}")


with tempfile.TemporaryDirectory() as tmp:
    rng = random.Random(20261125)
    for case in range(CASES):
        same_arithmetic(rng, case, tmp)
    for case in range(CASES, 2 * CASES):
        resume(rng, case, tmp)
    for case in range(2 * CASES, 2 * CASES + CASES // 2):
        two_devices(rng, case, tmp)
CLI.finish()
