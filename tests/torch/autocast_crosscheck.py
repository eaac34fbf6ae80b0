"""Cross-check dp-engine's --precision bf16 against PyTorch's CPU autocast(bfloat16): the same
safetensors init, the same batches and chunks, a faithful DataParallel step run under autocast
(replicas on their chunks, logits gathered, cross-entropy, gradients summed, SGD on the float32
master). Per-step losses must agree within a tolerance derived from bfloat16's precision (below).

The two are not bit-identical by design: autocast keeps BatchNorm's weights float32 and rounds
gradients where its ops do, dp rounds every replica parameter and sends 16-bit replica gradients.
What must agree is the arithmetic's precision, so the bound is stated in bfloat16 units:
bfloat16 keeps 8 significant bits, a relative rounding error uniform in ±u, u = 2^-9, standard
deviation u/√3 per rounding. A logit passes through ~2 roundings per layer (its output, and its
input in the next layer), so after L layers it carries ~2L independent roundings: a relative error
of standard deviation √(2L)·u/√3, in either engine, √2 times that between the two. A row's
cross-entropy moves by at most |z|max times the logits' relative error (z the logits), and the loss
is a mean over B rows whose errors are independent, which divides by √B. The bound is 4 such
standard deviations, doubled for what the earlier steps' updates carried forward:
    tol = 2 · 4 · √2 · √(2L) · (u/√3) · max(1, |z|max) / √B
That covers a step's own rounding, not what a model's later steps make of it: a network whose
BatchNorm normalises a chunk's few values at 1x1 amplifies a bfloat16-sized difference step by
step, by how much depending on every sum's order (the machine's BLAS kernels). So each step's bound
also takes 4x the spread the model itself shows at that step under a bfloat16-sized difference:
autocast run again from weights each scaled by (1 + u·r), r uniform in [-1, 1] (what rounding the
replicas' parameters to bfloat16 does), measured in the run, on the machine it runs on:
    tol_s = tol + 4 · |autocast_s - autocast'_s|
dp's float32 run is compared with autocast too and reported beside (not asserted: float32 is
itself within bfloat16's precision of autocast).

usage: autocast_crosscheck.py DP_BINARY   (exit 77 = skipped: no torch)
"""
import copy
import json
import math
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

U = 2.0 ** -9  # bfloat16's unit roundoff
# model, devices, batch, split, steps, rounded layers on the way to the logits (L)
CASES = [
    ("mlp", 2, 32, "even", 5, 3),            # Linear, ReLU, Linear: 3 stored activations
    ("convnet", 3, 24, "even", 5, 9),        # 2 x (Conv, BN, ReLU, MaxPool) + Linear
    ("resnet8", 2, 10, "chunks:6,4", 4, 24),  # stem + 3 stages of a BasicBlock, pooled, Linear
    # Model files (tools/export_model.py, file_models.py): the graph's joins, and SqueezeNet 1.1.
    ("file:joins", 2, 10, "chunks:6,4", 4, 12),
    # SqueezeNet at 32x32 amplifies a bfloat16-sized difference tenfold by its third step (its own
    # spread, measured below): two steps keep the check sharp.
    ("file:tv_squeezenet1_1", 3, 12, "even", 2, 36),
]
LR, MOMENTUM = 0.005, 0.5  # a stable run on random data: a diverging one amplifies any difference


def is_cifar(name):
    return name == "resnet8" or name.startswith("file:")


def dp_losses(dp, work, name, ndev, batch, split, steps, init, precision, dp_model):
    metrics = os.path.join(work, f"{name.replace(':', '-')}-{precision}.jsonl")
    data = os.path.join(work, "cifar" if is_cifar(name) else "mnist")
    subprocess.run([dp, "train", "--model", dp_model, "--data", data, "--devices", f"host:{ndev}", "--batch", str(batch),
                    "--split", split, "--steps", str(steps), "--no-shuffle", "--init", init, "--lr", str(LR),
                    "--momentum", str(MOMENTUM), "--precision", precision, "--metrics", metrics],
                   check=True, stdout=subprocess.DEVNULL)
    return [json.loads(line)["loss"] for line in open(metrics) if "step" in json.loads(line)]


def main():
    dp = os.path.abspath(sys.argv[1])
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        g = torch.Generator().manual_seed(11)
        images, labels = ref.random_mnist_dir(os.path.join(work, "mnist"), 200, 20, g)
        cifar_images = (torch.rand(60, 3, 32, 32, generator=g) * 255).to(torch.uint8)
        cifar_labels = torch.randint(0, 10, (60,), generator=g)
        os.makedirs(os.path.join(work, "cifar"))
        ref.write_cifar(cifar_images, cifar_labels, os.path.join(work, "cifar", "data_batch_1.bin"))
        ref.write_cifar(cifar_images[:10], cifar_labels[:10], os.path.join(work, "cifar", "test_batch.bin"))
        for idx, (name, ndev, batch, split, steps, layers) in enumerate(CASES):
            torch.manual_seed(200 + idx)
            if name.startswith("file:"):
                import crosscheck
                import file_models
                model = file_models.make(name[len("file:"):])
                dp_model = crosscheck.export_file_model(model, name, work)
            else:
                model, dp_model = ref.make_model(name), name
            init = os.path.join(work, f"{name.replace(':', '-')}.safetensors")
            st_io.save(model.state_dict(), init)
            got = dp_losses(dp, work, name, ndev, batch, split, steps, init, "bf16", dp_model)
            got32 = dp_losses(dp, work, name, ndev, batch, split, steps, init, "fp32", dp_model)
            cifar = is_cifar(name)
            x_all = ref.normalise(cifar_images if cifar else images)
            y_all = (cifar_labels if cifar else labels).long()

            def autocast_losses(start):
                """PyTorch's DataParallel step under autocast from `start`: per-step losses, largest |logit|."""
                m = copy.deepcopy(start)
                opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM)
                m.train()
                losses, zmax = [], 0.0
                for s in range(steps):
                    x, y = x_all[s * batch:(s + 1) * batch], y_all[s * batch:(s + 1) * batch]
                    largest = []
                    losses.append(ref.dp_step(m, opt, x, y, ref.chunk_sizes(split, batch, ndev), autocast=torch.bfloat16,
                                              on_logits=lambda z: largest.append(z.float().abs().max().item())))
                    zmax = max(zmax, largest[0])
                return losses, zmax

            want, zmax = autocast_losses(model)
            moved = copy.deepcopy(model)
            r = torch.Generator().manual_seed(300 + idx)
            with torch.no_grad():
                for p in moved.parameters():
                    p.mul_(1 + U * (2 * torch.rand(p.shape, generator=r) - 1))
            spread = [abs(a - b) for a, b in zip(want, autocast_losses(moved)[0])]
            tol = 2 * 4 * math.sqrt(2) * math.sqrt(2 * layers) * (U / math.sqrt(3)) * max(1.0, zmax) / math.sqrt(batch)
            bounds = [tol + 4 * d for d in spread]
            worst = max(abs(a - b) / t for a, b, t in zip(got, want, bounds))  # in units of each step's bound
            worst32 = max(abs(a - b) for a, b in zip(got32, want))
            # And it did round: bfloat16 is not float32.
            ok = len(got) == steps and worst <= 1.0 and got != got32
            failed += 0 if ok else 1
            print(f"{'ok ' if ok else 'FAIL'} {name} host:{ndev} batch {batch} split {split}: bf16 losses "
                  f"{['%.4f' % v for v in got]} vs autocast {['%.4f' % v for v in want]}: bounds "
                  f"{['%.1e' % b for b in bounds]} (rounding {tol:.1e}, then the model's own spread), worst "
                  f"{worst:.2f} of its bound; dp fp32 vs autocast {worst32:.2e}")
    print(f"{len(CASES) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
