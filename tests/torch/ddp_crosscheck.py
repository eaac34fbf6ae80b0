"""Cross-check dp's --sync allreduce against PyTorch's DistributedDataParallel (gloo, CPU, two
processes): the same safetensors init, the same batches (--no-shuffle; rank r takes chunk r),
BatchNorm with DDP's broadcast_buffers; per-step loss and rank 0's final weights and running
statistics must agree. Chunks are even: DDP averages the ranks' mean losses, which is the mean over
the whole batch only when the chunks are equal (dp's all-reduce sums gradients of the global mean,
so it also holds for uneven chunks).

usage: ddp_crosscheck.py DP_BINARY   (exit 77 = skipped: no torch or no gloo)
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
CASES = [  # model, optimizer flags
    ("convnet", ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]),
    ("mlp", ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0"]),
]


def worker(rank, work, model_name, flags, images, labels):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, f"store-{model_name}"),
                            rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = ref.make_model(model_name)
    model.load_state_dict(st_io.load(os.path.join(work, f"init-{model_name}.safetensors")))
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=True)
    lr = float(flags[flags.index("--lr") + 1])
    if "adamw" in flags:
        opt = torch.optim.AdamW(ddp.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=float(flags[flags.index("--momentum") + 1]))
    x_all, y_all = ref.normalise(images), labels.long()
    chunk = BATCH // WORLD
    losses = []
    model.train()
    for s in range(STEPS):
        lo = s * BATCH + rank * chunk
        x, y = x_all[lo:lo + chunk], y_all[lo:lo + chunk]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / WORLD)
    if rank == 0:
        st_io.save(model.state_dict(), os.path.join(work, f"ddp-{model_name}.safetensors"))
        json.dump(losses, open(os.path.join(work, f"ddp-{model_name}.json"), "w"))
    dist.destroy_process_group()


def main():
    dp = os.path.abspath(sys.argv[1])
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        g = torch.Generator().manual_seed(11)
        mnist = os.path.join(work, "mnist")
        images, labels = ref.random_mnist_dir(mnist, BATCH * STEPS, 4, g)
        for model_name, flags in CASES:
            torch.manual_seed(5)
            st_io.save(ref.make_model(model_name).state_dict(), os.path.join(work, f"init-{model_name}.safetensors"))
            out, metrics = os.path.join(work, f"dp-{model_name}.safetensors"), os.path.join(work, f"m-{model_name}.jsonl")
            subprocess.run([dp, "train", "--model", model_name, "--data", mnist, "--devices", f"host:{WORLD}",
                            "--sync", "allreduce", "--batch", str(BATCH), "--steps", str(STEPS), "--no-shuffle",
                            "--init", os.path.join(work, f"init-{model_name}.safetensors"), "--save", out,
                            "--metrics", metrics] + flags, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            mp.spawn(worker, args=(work, model_name, flags, images, labels), nprocs=WORLD, join=True)
            got = [json.loads(l)["loss"] for l in open(metrics) if '"step"' in l]
            want = json.load(open(os.path.join(work, f"ddp-{model_name}.json")))
            ours, theirs = st_io.load(out), st_io.load(os.path.join(work, f"ddp-{model_name}.safetensors"))
            problems = []
            if any(abs(a - b) > 1e-4 * max(1, abs(b)) for a, b in zip(got, want)) or len(got) != len(want):
                problems.append(f"losses {got} != DDP {want}")
            if set(ours) != set(theirs):
                problems.append(f"names {sorted(ours)} != {sorted(theirs)}")
            worst = 0.0
            for k, w in theirs.items():
                if w.dtype == torch.int64:
                    if not torch.equal(ours[k], w):
                        problems.append(f"{k}: {ours[k]} != {w}")
                    continue
                worst = max(worst, (ours[k] - w).abs().max().item())
                if not torch.allclose(ours[k], w, rtol=1e-4, atol=1e-4):
                    problems.append(f"{k} differs by {(ours[k] - w).abs().max().item()}")
            if problems:
                failed += 1
                print(f"FAIL {model_name}: " + "; ".join(problems))
            else:
                print(f"ok  {model_name} host:{WORLD} --sync allreduce == DDP (gloo, {WORLD} processes): losses "
                      f"{['%.5f' % l for l in got]}, worst weight error {worst:.2e}")
    print(f"{len(CASES) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
