"""Cross-check dp's --sync allreduce against PyTorch's DistributedDataParallel (gloo, CPU, two
processes): the same safetensors init, the same batches (--no-shuffle; rank r takes chunk r),
BatchNorm with DDP's broadcast_buffers; per-step loss and rank 0's final weights and running
statistics must agree. Chunks are even: DDP averages the ranks' mean losses, which is the mean over
the whole batch only when the chunks are equal (dp's all-reduce sums gradients of the global mean,
so it also holds for uneven chunks). With --accumulate N, against DDP's no_sync loop over N
micro-batches.

bf16: dp's --sync allreduce --precision bf16 against DDP with each rank's forward and loss under CPU
autocast(bfloat16). The two are not bit-identical by design (autocast keeps BatchNorm's parameters
float32 and rounds where its ops do; dp rounds every parameter copy and every replica gradient), so
what must agree is the arithmetic's precision. The losses are held to autocast_crosscheck.py's
bound, derived from bfloat16's unit roundoff u = 2^-9 over the L rounded layers to the logits:
    tol = 2 · 4 · √2 · √(2L) · (u/√3) · max(1, |z|max) / √B
and the weights (parameters and running statistics, as one vector) must be no further from DDP's
than dp's own float32 run is, give or take half of that: dp's bfloat16 differs from autocast by
roundings of the same size as autocast's from float32. And dp's bf16 must differ from its fp32.

usage: ddp_crosscheck.py DP_BINARY   (exit 77 = skipped: no torch or no gloo)
"""
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    print("SKIP: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)
if not dist.is_available() or not dist.is_gloo_available():
    print("SKIP: this PyTorch has no gloo backend")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402
import st_io  # noqa: E402

WORLD, BATCH, STEPS = 2, 12, 3
U = 2.0 ** -9  # bfloat16's unit roundoff
CASES = [  # model, precision, optimizer flags, rounded layers on the way to the logits (bf16's bound)
    ("convnet", "fp32", ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"], 0),
    ("mlp", "fp32", ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0"], 0),
    ("convnet", "bf16", ["--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.5"], 9),
    # Gradient accumulation against DDP's no_sync loop: backward() on each micro-batch (its loss
    # divided by their number), all-reduced on the last only, then one step; BatchNorm's buffers
    # broadcast before every forward.
    ("convnet", "fp32", ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--accumulate", "2"], 0),
    ("mlp", "fp32", ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0", "--accumulate", "3"], 0),
]
MAX_ACCUMULATE = 3


def worker(rank, work, tag, model_name, precision, flags, images, labels):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, f"store-{tag}"),
                            rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = ref.make_model(model_name)
    model.load_state_dict(st_io.load(os.path.join(work, f"init-{tag}.safetensors")))
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=True)
    lr = float(flags[flags.index("--lr") + 1])
    if "adamw" in flags:
        opt = torch.optim.AdamW(ddp.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=float(flags[flags.index("--momentum") + 1]))
    x_all, y_all = ref.normalise(images), labels.long()
    chunk = BATCH // WORLD
    losses, zmax = [], 0.0
    model.train()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    accumulate = int(flags[flags.index("--accumulate") + 1]) if "--accumulate" in flags else 1
    for s in range(STEPS):
        opt.zero_grad()
        total = torch.zeros(())
        for i in range(accumulate):  # micro-batch m = s·N + i of BATCH samples; this rank's chunk of it
            lo = (s * accumulate + i) * BATCH + rank * chunk
            x, y = x_all[lo:lo + chunk], y_all[lo:lo + chunk]
            with ddp.no_sync() if i + 1 < accumulate else contextlib.nullcontext():
                with autocast:
                    logits = ddp(x)
                    loss = torch.nn.functional.cross_entropy(logits, y) / accumulate
                zmax = max(zmax, logits.detach().float().abs().max().item())
                loss.backward()
            total += loss.detach()
        opt.step()
        dist.all_reduce(total)
        losses.append(total.item() / WORLD)
    if rank == 0:
        st_io.save(model.state_dict(), os.path.join(work, f"ddp-{tag}.safetensors"))
        json.dump({"losses": losses, "zmax": zmax}, open(os.path.join(work, f"ddp-{tag}.json"), "w"))
    dist.destroy_process_group()


def run_dp(dp, work, mnist, tag, model_name, precision, flags, init):
    """dp's --sync allreduce run: its per-step losses and saved weights."""
    out, metrics = os.path.join(work, f"dp-{tag}-{precision}.safetensors"), os.path.join(work, f"m-{tag}-{precision}.jsonl")
    subprocess.run([dp, "train", "--model", model_name, "--data", mnist, "--devices", f"host:{WORLD}", "--sync",
                    "allreduce", "--batch", str(BATCH), "--steps", str(STEPS), "--no-shuffle", "--init", init, "--save",
                    out, "--metrics", metrics, "--precision", precision] + flags,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [json.loads(l)["loss"] for l in open(metrics) if '"step"' in l], st_io.load(out)


def distance(a, b):
    """‖a − b‖₂ over every float tensor of two state dicts, as one vector."""
    return math.sqrt(sum(((a[k] - b[k]).double() ** 2).sum().item() for k in b if b[k].dtype != torch.int64))


def main():
    dp = os.path.abspath(sys.argv[1])
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        g = torch.Generator().manual_seed(11)
        mnist = os.path.join(work, "mnist")
        images, labels = ref.random_mnist_dir(mnist, BATCH * STEPS * MAX_ACCUMULATE, 4, g)
        for model_name, precision, flags, layers in CASES:
            tag = f"{model_name}-{precision}" + (f"-accumulate{flags[-1]}" if "--accumulate" in flags else "")
            torch.manual_seed(5)
            init = os.path.join(work, f"init-{tag}.safetensors")
            st_io.save(ref.make_model(model_name).state_dict(), init)
            got, ours = run_dp(dp, work, mnist, tag, model_name, precision, flags, init)
            mp.spawn(worker, args=(work, tag, model_name, precision, flags, images, labels), nprocs=WORLD, join=True)
            reference = json.load(open(os.path.join(work, f"ddp-{tag}.json")))
            want, theirs = reference["losses"], st_io.load(os.path.join(work, f"ddp-{tag}.safetensors"))
            problems = []
            if set(ours) != set(theirs):
                problems.append(f"names {sorted(ours)} != {sorted(theirs)}")
            for k, w in theirs.items():
                if w.dtype == torch.int64 and not torch.equal(ours[k], w):
                    problems.append(f"{k}: {ours[k]} != {w}")
            if precision == "bf16":
                tol = 2 * 4 * math.sqrt(2) * math.sqrt(2 * layers) * (U / math.sqrt(3)) * max(1.0, reference["zmax"]) / \
                    math.sqrt(BATCH)
                if len(got) != len(want) or any(abs(a - b) > tol for a, b in zip(got, want)):
                    problems.append(f"losses {got} != autocast DDP {want} (bound {tol:.2e})")
                got32, ours32 = run_dp(dp, work, mnist, tag, model_name, "fp32", flags, init)
                d16, d32 = distance(ours, theirs), distance(ours32, theirs)
                if d16 > 1.5 * d32:
                    problems.append(f"weights {d16:.2e} from autocast DDP's, dp fp32's only {d32:.2e}")
                if distance(ours, ours32) == 0:
                    problems.append("bf16 weights equal fp32's: nothing was rounded")
                detail = f"bound {tol:.1e}; weights {d16:.2e} from DDP's, dp fp32's {d32:.2e}"
            else:
                if len(got) != len(want) or any(abs(a - b) > 1e-4 * max(1, abs(b)) for a, b in zip(got, want)):
                    problems.append(f"losses {got} != DDP {want}")
                worst = 0.0
                for k, w in theirs.items():
                    if w.dtype == torch.int64:
                        continue
                    worst = max(worst, (ours[k] - w).abs().max().item())
                    if not torch.allclose(ours[k], w, rtol=1e-4, atol=1e-4):
                        problems.append(f"{k} differs by {(ours[k] - w).abs().max().item()}")
                detail = f"worst weight error {worst:.2e}"
            if problems:
                failed += 1
                print(f"FAIL {tag}: " + "; ".join(problems))
            else:
                print(f"ok  {tag} host:{WORLD} --sync allreduce == DDP{' under autocast' if precision == 'bf16' else ''} "
                      f"(gloo, {WORLD} processes): losses {['%.5f' % l for l in got]} vs {['%.5f' % l for l in want]} "
                      f"({detail})")
    print(f"{len(CASES) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
