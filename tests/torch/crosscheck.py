"""Cross-check dp-engine against PyTorch: same safetensors init, same batches (--no-shuffle),
per-step loss and final weights (and BatchNorm buffers) must agree.

usage: crosscheck.py DP_BINARY [WORKDIR]   (exit 77 = skipped: no torch)
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402
import st_io  # noqa: E402

CASES = [
    # model, devices, batch, split, steps, sgd flags
    ("mlp", 3, 50, "even", 4, ["--lr", "0.1", "--momentum", "0.9"]),
    ("mlp", 4, 3, "even", 3, ["--lr", "0.05", "--momentum", "0.5", "--nesterov", "--weight-decay", "0.01"]),
    ("convnet", 4, 10, "even", 3, ["--lr", "0.05", "--momentum", "0.9"]),
    ("convnet", 4, 36, "chunks:5,20,7,4", 3, ["--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.001"]),
    ("convnet", 3, 24, "gpu0:0", 2, ["--lr", "0.02", "--momentum", "0"]),
    ("mlp", 3, 24, "gpu0:5", 2, ["--lr", "0.02", "--momentum", "0"]),
    ("convnet", 2, 30, "ratios:4,1", 3, ["--lr", "0.05", "--momentum", "0.9"]),
    ("mlp", 2, 64, "even", 4, ["--lr", "0.05", "--momentum", "0.8", "--dampening", "0.3"]),
]


def run_case(dp, work, case, idx):
    model_name, ndev, batch, split, steps, flags = case
    torch.manual_seed(100 + idx)
    model = ref.make_model(model_name)
    init = os.path.join(work, f"init{idx}.safetensors")
    st_io.save(model.state_dict(), init)
    out = os.path.join(work, f"out{idx}.safetensors")
    metrics = os.path.join(work, f"m{idx}.jsonl")
    cmd = [dp, "train", "--model", model_name, "--data", work, "--devices", f"host:{ndev}", "--batch", str(batch),
           "--split", split, "--steps", str(steps), "--no-shuffle", "--init", init, "--save", out, "--metrics",
           metrics] + flags
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    got_losses = [json.loads(line)["loss"] for line in open(metrics) if "step" in json.loads(line)]
    got_chunks = [json.loads(line)["chunks"] for line in open(metrics) if "step" in json.loads(line)]

    lr = float(flags[flags.index("--lr") + 1])
    momentum = float(flags[flags.index("--momentum") + 1])  # always given: dp defaults to 0.9
    wd = float(flags[flags.index("--weight-decay") + 1]) if "--weight-decay" in flags else 0.0
    damp = float(flags[flags.index("--dampening") + 1]) if "--dampening" in flags else 0.0
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, dampening=damp, weight_decay=wd,
                          nesterov="--nesterov" in flags)
    images, labels = DATA
    x_all, y_all = ref.normalise(images).unsqueeze(1), labels.long()
    model.train()
    want_losses = []
    for s in range(steps):
        x, y = x_all[s * batch:(s + 1) * batch], y_all[s * batch:(s + 1) * batch]
        sizes = ref.chunk_sizes(split, len(y), ndev)
        assert got_chunks[s] == sizes, f"chunks {got_chunks[s]} != {sizes}"
        want_losses.append(ref.dp_step(model, opt, x, y, sizes))

    label = f"{model_name} host:{ndev} batch {batch} split {split}"
    worst = 0.0
    for s, (g, w) in enumerate(zip(got_losses, want_losses)):
        assert abs(g - w) <= 1e-4 * max(1.0, abs(w)), f"{label}: step {s + 1} loss {g} != PyTorch {w}"
    assert len(got_losses) == steps, f"{label}: {len(got_losses)} steps logged"
    got = st_io.load(out)
    want = model.state_dict()
    assert set(got) == set(want), f"{label}: names {sorted(got)} != {sorted(want)}"
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape and g.dtype == w.dtype, f"{label}: {k} {g.shape}/{g.dtype} vs {w.shape}/{w.dtype}"
        if w.dtype == torch.int64:
            assert torch.equal(g, w), f"{label}: {k} {g} != {w}"
            continue
        err = (g - w).abs().max().item()
        worst = max(worst, err / max(1.0, w.abs().max().item()))
        assert torch.allclose(g, w, rtol=1e-4, atol=2e-5), f"{label}: {k} differs by {err}"
    print(f"ok  {label}: {steps} steps, losses {['%.5f' % l for l in got_losses]}, worst weight error {worst:.2e}")


def main():
    dp = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as work:
        g = torch.Generator().manual_seed(7)
        n = 200
        images = (torch.rand(n, 28, 28, generator=g) ** 3 * 255).to(torch.uint8)
        labels = torch.randint(0, 10, (n,), generator=g)
        ref.write_idx(images, labels, os.path.join(work, "train-images-idx3-ubyte.gz"),
                      os.path.join(work, "train-labels-idx1-ubyte.gz"))
        ref.write_idx(images[:20], labels[:20], os.path.join(work, "t10k-images-idx3-ubyte.gz"),
                      os.path.join(work, "t10k-labels-idx1-ubyte.gz"))
        global DATA
        DATA = (images, labels)
        for i, case in enumerate(CASES):
            run_case(dp, work, case, i)
    print(f"{len(CASES)} passed, 0 failed")


if __name__ == "__main__":
    main()
