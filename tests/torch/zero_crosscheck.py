"""Cross-check dp's ZeRO stages against PyTorch's ZeroRedundancyOptimizer under
DistributedDataParallel (gloo, CPU, 2 and 3 processes): the same safetensors init, the same batches
(--no-shuffle; rank r takes chunk r), BatchNorm with DDP's broadcast_buffers; the per-step losses,
rank 0's final weights and running statistics, and the optimizer state (dp's checkpoint of it is
the whole, unsharded state; ZeroRedundancyOptimizer's consolidated on rank 0) must agree. Chunks
are even (DDP averages the ranks' means). ZeroRedundancyOptimizer shards by whole parameters and
dp by pieces of gradient buckets; both update each element as torch.optim does, so the results are
equal to float tolerance for every stage.

usage: zero_crosscheck.py DP_BINARY   (exit 77 = skipped: no torch or no gloo)
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.distributed.optim import ZeroRedundancyOptimizer
except ImportError:
    print("SKIP: PyTorch (with torch.distributed.optim) is not installed (apt-get install python3-torch)")
    sys.exit(77)
if not dist.is_available() or not dist.is_gloo_available():
    print("SKIP: this PyTorch has no gloo backend")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402
import st_io  # noqa: E402

BATCH, STEPS = 12, 3
CASES = [  # model, processes, dp flags
    ("mlp", 2, ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0"]),
    ("convnet", 2, ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]),
    ("mlp", 3, ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0"]),
]


def lr_of(flags):
    """The --lr of a case's dp flags."""
    return float(flags[flags.index("--lr") + 1])


def worker(rank, world, work, tag, model_name, flags, images, labels):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, f"store-{tag}"), rank=rank,
                            world_size=world)
    model = ref.make_model(model_name)
    model.load_state_dict(st_io.load(os.path.join(work, f"init-{tag}.safetensors")))
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=True)
    lr = float(flags[flags.index("--lr") + 1])
    if "adamw" in flags:
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=lr)
    else:
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, lr=lr,
                                      momentum=float(flags[flags.index("--momentum") + 1]))
    x_all, y_all = ref.normalise(images), labels.long()
    chunk = BATCH // world
    losses = []
    # AdamW's denominator √v̂ at each step, per element, as a share of the tensor's largest: the
    # lowest share over the steps says whether rounding can choose the element's update (below).
    second = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    lowest = {}
    model.train()
    for s in range(STEPS):
        opt.zero_grad()
        lo = s * BATCH + rank * chunk
        loss = torch.nn.functional.cross_entropy(ddp(x_all[lo:lo + chunk]), y_all[lo:lo + chunk])
        loss.backward()
        for n, p in model.named_parameters():  # the all-reduced gradient, the same on every rank
            second[n] = 0.999 * second[n] + 0.001 * p.grad.detach() ** 2  # AdamW's default betas
            root = (second[n] / (1 - 0.999 ** (s + 1))).sqrt()
            share = root / root.max().clamp_min(1e-30)
            lowest[n] = share if n not in lowest else torch.minimum(lowest[n], share)
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world)
    opt.consolidate_state_dict(to=0)
    if rank == 0:
        st_io.save(model.state_dict(), os.path.join(work, f"zero-{tag}.safetensors"))
        state = opt.state_dict()["state"]  # per parameter, in model.parameters() order
        names = [n for n, _ in model.named_parameters()]
        moments = {}
        for i, n in enumerate(names):
            for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
                if key in state[i]:
                    moments[f"{key}.{n}"] = state[i][key].clone()  # dp's checkpoint names: <buffer>.<parameter>
        st_io.save(moments, os.path.join(work, f"zero-{tag}-optimizer.safetensors"))
        st_io.save(lowest, os.path.join(work, f"zero-{tag}-lowest.safetensors"))
        json.dump({"losses": losses}, open(os.path.join(work, f"zero-{tag}.json"), "w"))
    dist.destroy_process_group()


def run_dp(dp, work, mnist, tag, model_name, world, flags, init, stage):
    """dp's ZeRO run: its per-step losses, saved weights and checkpointed optimizer state."""
    out, metrics = os.path.join(work, f"dp-{tag}-{stage}.safetensors"), os.path.join(work, f"m-{tag}-{stage}.jsonl")
    ck = os.path.join(work, f"ck-{tag}-{stage}")
    subprocess.run([dp, "train", "--model", model_name, "--data", mnist, "--devices", f"host:{world}", "--sync", stage,
                    "--batch", str(BATCH), "--steps", str(STEPS), "--no-shuffle", "--init", init, "--save", out,
                    "--metrics", metrics, "--checkpoint", ck, "--bucket-mb", "0.05"] + flags,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    step = sorted(os.listdir(ck))[-1]
    optimizer = st_io.load(os.path.join(ck, step, "optimizer.safetensors"))
    return [json.loads(l)["loss"] for l in open(metrics) if '"step"' in l], st_io.load(out), optimizer


def main():
    dp = os.path.abspath(sys.argv[1])
    failed = total = 0
    with tempfile.TemporaryDirectory() as work:
        g = torch.Generator().manual_seed(13)
        mnist = os.path.join(work, "mnist")
        images, labels = ref.random_mnist_dir(mnist, BATCH * STEPS, 4, g)
        for model_name, world, flags in CASES:
            tag = f"{model_name}-{world}"
            torch.manual_seed(6)
            init = os.path.join(work, f"init-{tag}.safetensors")
            st_io.save(ref.make_model(model_name).state_dict(), init)
            mp.spawn(worker, args=(world, work, tag, model_name, flags, images, labels), nprocs=world, join=True)
            want = json.load(open(os.path.join(work, f"zero-{tag}.json")))["losses"]
            theirs = st_io.load(os.path.join(work, f"zero-{tag}.safetensors"))
            their_moments = st_io.load(os.path.join(work, f"zero-{tag}-optimizer.safetensors"))
            lowest = st_io.load(os.path.join(work, f"zero-{tag}-lowest.safetensors"))
            for stage in ("zero1", "zero2", "zero3"):
                total += 1
                got, ours, our_moments = run_dp(dp, work, mnist, tag, model_name, world, flags, init, stage)
                problems = []
                if len(got) != len(want) or any(abs(a - b) > 1e-4 * max(1, abs(b)) for a, b in zip(got, want)):
                    problems.append(f"losses {got} != {want}")
                worst, undecided = 0.0, 0
                for k, w in theirs.items():
                    if w.dtype == torch.int64:
                        if not torch.equal(ours[k], w):
                            problems.append(f"{k}: {ours[k]} != {w}")
                        continue
                    err = (ours[k] - w).abs()
                    worst = max(worst, err.max().item())
                    far = err > 1e-4 + 1e-4 * w.abs()
                    if "adamw" in flags and k in lowest:
                        # AdamW moves an element by lr·m̂/(√v̂ + ε) a step. float32 rounds a gradient
                        # element to about 1e-6 of its tensor's largest (a sum of a few thousand
                        # terms at most). Where √v̂ is at least 1e-3 of the tensor's largest at every
                        # step, that moves an update by at most about 1e-3 of lr: within the 1e-4
                        # above for these lr and steps. Where at some step it is less (a gradient
                        # that cancels to almost nothing; at step 1 √v̂ is |g| itself), rounding
                        # chooses that step's update, up to lr either way: 2·lr a step may part
                        # the two engines there. Which elements these are depends on the order of
                        # every sum, so on the machine's BLAS kernels.
                        open_ = lowest[k] < 1e-3
                        undecided += int((far & open_).sum())
                        far = (far & ~open_) | (open_ & (err > 2 * lr_of(flags) * STEPS))
                    if bool(far.any()):
                        problems.append(f"{k} differs by {err.max().item()} ({int(far.sum())} of {w.numel()} "
                                        "elements past the bound)")
                for k, w in their_moments.items():
                    if k not in our_moments or not torch.allclose(our_moments[k].reshape(w.shape), w, rtol=1e-3,
                                                                  atol=1e-5):
                        problems.append(f"optimizer state {k} differs")
                if set(our_moments) != set(their_moments):
                    problems.append(f"optimizer state names {sorted(our_moments)} != {sorted(their_moments)}")
                if problems:
                    failed += 1
                    print(f"FAIL {tag} {stage}: " + "; ".join(problems[:5]))
                else:
                    print(f"ok  {tag} host:{world} --sync {stage} == DDP + ZeroRedundancyOptimizer (gloo, {world} "
                          f"processes): losses {['%.5f' % l for l in got]} vs {['%.5f' % l for l in want]}, worst "
                          f"weight error {worst:.2e} ({undecided} elements whose update rounding chose moved by "
                          f"it), optimizer state equal ({len(their_moments)} tensors)")
    print(f"{total - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
