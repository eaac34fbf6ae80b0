"""Cross-check dp-engine against PyTorch: same safetensors init, same batches (--no-shuffle),
per-step loss and final weights (and BatchNorm buffers) must agree.

usage: crosscheck.py DP_BINARY [WORKDIR]   (exit 77 = skipped: no torch)
"""
import collections
import copy
import json
import os
import subprocess
import sys
import tempfile
import types

try:
    import torch
except ImportError:
    print("SKIP: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hash_dropout  # noqa: E402
import reference as ref  # noqa: E402
import st_io  # noqa: E402

GPT_FLAGS = ["--gpt-layers", "2", "--gpt-heads", "2", "--gpt-dim", "32", "--context", "16"]
GPT_VOCAB = 128  # the token files' ids are below 100: rounded up to a multiple of 64
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
    # Residual networks (torchvision's BasicBlock as the reference) over uneven chunks, BatchNorm
    # normalising each chunk on its own.
    ("resnet8", 3, 11, "even", 3, ["--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.0005"]),
    ("resnet8", 4, 14, "chunks:2,6,1,5", 2, ["--lr", "0.05", "--momentum", "0.9"]),
    # One step: ResNet-18 on 6 samples (BatchNorm over chunks of 4 and 2) is so chaotic in float32
    # that a second step magnifies one flipped ReLU (below) to 8% of lr in its first convolution;
    # resnet8 checks several steps.
    ("resnet18", 2, 6, "ratios:2,1", 1, ["--lr", "0.02", "--momentum", "0.9"]),
    # AdamW (torch.optim.AdamW), schedules and gradient clipping over uneven chunks.
    ("mlp", 3, 20, "chunks:3,10,7", 5, ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0",
                                        "--lr-schedule", "cosine", "--warmup-steps", "2", "--min-lr", "0.0005"]),
    ("convnet", 4, 18, "even", 4, ["--optimizer", "adamw", "--lr", "0.002", "--momentum", "0", "--betas", "0.8,0.99",
                                   "--eps", "1e-6", "--weight-decay", "0.05", "--clip-grad-norm", "0.5"]),
    ("resnet8", 2, 10, "gpu0:3", 3, ["--optimizer", "adamw", "--lr", "0.001", "--momentum", "0",
                                     "--lr-schedule", "step:2,0.5", "--clip-grad-norm", "1.0"]),
    ("mlp", 2, 24, "even", 5, ["--lr", "0.1", "--momentum", "0.9", "--lr-schedule", "cosine", "--clip-grad-norm",
                               "0.3"]),
    # nanoGPT's GPT on token files (vocabulary 100 ids -> 128): a loss row per token, over uneven
    # chunks, gathered (DataParallel's) and in-replica, SGD and AdamW.
    # Its AdamW decays the matrices only (nanoGPT's groups, the GPT's default), strongly enough
    # that decaying the LayerNorm weights too would be seen.
    ("gpt", 3, 5, "chunks:1,3,1", 3, ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0", "--weight-decay",
                                      "0.5"] + GPT_FLAGS),
    ("gpt", 2, 4, "even", 3, ["--optimizer", "sgd", "--lr", "0.5", "--momentum", "0.9", "--loss", "in-replica"]
     + GPT_FLAGS),
    ("gpt", 4, 7, "even", 3, ["--optimizer", "adamw", "--lr", "0.002", "--momentum", "0", "--clip-grad-norm", "0.5",
                              "--loss", "in-replica", "--gpt-layers", "1", "--gpt-heads", "4", "--gpt-dim", "16",
                              "--context", "8", "--weight-decay", "0.1", "--weight-decay-params", "all"]),
    # Weight decay on the matrices only (nanoGPT's groups; the GPT's default, above): SGD's L2
    # penalty spares the convnet's biases and BatchNorm weights.
    ("convnet", 2, 12, "even", 3, ["--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.05",
                                   "--weight-decay-params", "matrices"]),
    # Label smoothing (CrossEntropyLoss(label_smoothing=ε)): the gathered loss and each replica's.
    ("convnet", 3, 10, "even", 3, ["--lr", "0.05", "--momentum", "0.9", "--label-smoothing", "0.1"]),
    ("gpt", 2, 4, "even", 2, ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0", "--loss", "in-replica",
                              "--label-smoothing", "0.2", "--accumulate", "2"] + GPT_FLAGS),
    # Gradient accumulation (--accumulate N, the batch is a micro-batch): PyTorch's loop calling
    # backward() on each micro-batch, weighted by its share of the rows, and stepping once. The
    # residual model's BatchNorm normalises each micro-batch and updates its statistics N times.
    ("mlp", 3, 8, "chunks:1,4,3", 3, ["--lr", "0.1", "--momentum", "0.9", "--accumulate", "3"]),
    ("resnet8", 2, 6, "gpu0:2", 2, ["--lr", "0.05", "--momentum", "0.9", "--clip-grad-norm", "1.0", "--accumulate",
                                    "2"]),
    ("gpt", 2, 3, "even", 2, ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0", "--accumulate", "2",
                              "--loss", "in-replica"] + GPT_FLAGS),
    # nanoGPT's dropout at its four places, the reference drawing dp's masks (hash_dropout.py) for
    # each sample by its index in the whole batch, whichever replica takes it: uneven chunks, and
    # each micro-batch's own masks under accumulation.
    ("gpt", 3, 5, "chunks:1,3,1", 3, ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0", "--dropout", "0.2"]
     + GPT_FLAGS),
    ("gpt", 2, 4, "even", 2, ["--optimizer", "sgd", "--lr", "0.3", "--momentum", "0.9", "--loss", "in-replica",
                              "--dropout", "0.1", "--accumulate", "2"] + GPT_FLAGS),
    # A vocabulary of 4100 (GPT-2's 50257 in small): dp stores the logits' rows 4160 wide (aligned
    # for the GEMMs), a loss over 4100 classes — label smoothing's ε/V would show 4160 — gathered
    # over uneven chunks and scattered back.
    ("gpt", 3, 5, "chunks:1,3,1", 2, ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0", "--vocab", "4100",
                                      "--label-smoothing", "0.1"] + GPT_FLAGS),
    # --recompute blocks (activation checkpointing) is the identity on the arithmetic: the plain
    # PyTorch step is the reference. BatchNorm's running statistics updated once per forward, not
    # twice as under torch.utils.checkpoint; dropout's masks drawn again in the repeat.
    ("resnet8", 3, 11, "chunks:5,4,2", 2, ["--lr", "0.05", "--momentum", "0.9", "--recompute", "blocks"]),
    ("gpt", 3, 5, "chunks:1,3,1", 2, ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0", "--dropout", "0.2",
                                      "--recompute", "blocks"] + GPT_FLAGS),
]
CIFAR_MODELS = {"resnet8", "resnet18"}
CONV_MODELS = {"convnet", "resnet8", "resnet18"}


def is_file_model(name):
    """"file:NAME": file_models.make(NAME) exported with tools/export_model.py, run with --model FILE;
    "file:NAME@S": at 3xSxS from a float32 tensor file (TENSOR_SIZE), else CIFAR-shaped 3x32x32."""
    return name.startswith("file:")


def input_size(name):
    return int(name.split("@")[1]) if "@" in name else 32


def export_file_model(model, name, work, context=None):
    """The model file dp runs for a file model (context: a token model's sequence length)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
    import export_model
    path = os.path.join(work, name.replace(":", "-").replace("@", "-") + ".json")
    size = input_size(name)
    kind, shape = ("tokens", [context]) if context else ("image", [3, size, size])
    doc = export_model.export(copy.deepcopy(model), kind, shape, name, name)
    with open(path, "w") as f:
        f.write(export_model.to_json(doc))
    return path


def run_case(dp, work, case, idx):
    model_name, ndev, batch, split, steps, flags = case
    torch.manual_seed(100 + idx)

    def flag(name, default):
        return flags[flags.index(name) + 1] if name in flags else default
    gpt = model_name == "gpt"
    context = int(flag("--context", 0))
    if is_file_model(model_name):
        import file_models
        base = model_name[len("file:"):].split("@")[0]
        model = file_models.make(base)
        context = file_models.token_context(base) or context
        gpt = gpt or file_models.token_context(base) is not None  # a token model file: windows of tokens
        dp_model = export_file_model(model, model_name, work, file_models.token_context(base))
        if gpt:
            # nanoGPT's forward(idx, targets) gives every position's logits when given targets (the
            # loss, unread): what dp trains; a replica's copy keeps this forward.
            model.forward = types.MethodType(lambda self, idx: type(self).forward(self, idx, idx)[0], model)
        # PyTorch's dropouts and stochastic depths drawing dp's masks, site by site as dp numbers them
        size = input_size(model_name)
        example = torch.zeros(2, context, dtype=torch.long) if gpt else torch.zeros(2, 3, size, size)
        model = hash_dropout.with_dp_masks(model, example)
    else:
        model = ref.make_model(model_name, dict(vocab=int(flag("--vocab", GPT_VOCAB)), context=context, layers=int(flag("--gpt-layers", 0)),
                                                heads=int(flag("--gpt-heads", 0)), dim=int(flag("--gpt-dim", 0)),
                                                dropout=float(flag("--dropout", 0))))
        dp_model = model_name
    init = os.path.join(work, f"init{idx}.safetensors")
    st_io.save(model.state_dict(), init)
    tensors = "@" in model_name  # float32 samples at the model's size, exactly as PyTorch gets them
    cifar = model_name in CIFAR_MODELS or (is_file_model(model_name) and not tensors)
    data_dir = os.path.join(work, "tokens" if gpt else f"tensors{input_size(model_name)}" if tensors else "cifar" if cifar
                            else "mnist")

    def run_dp(suffix, kernels=None):
        """dp's run of the case (with `kernels`, OpenBLAS's kernel set of that name): its per-step
        metrics rows and its saved state."""
        out, metrics = os.path.join(work, f"out{idx}{suffix}.safetensors"), os.path.join(work, f"m{idx}{suffix}.jsonl")
        cmd = [dp, "train", "--model", dp_model, "--data", data_dir, "--devices", f"host:{ndev}", "--batch",
               str(batch), "--split", split, "--steps", str(steps), "--no-shuffle", "--init", init, "--save", out,
               "--metrics", metrics] + flags
        env = dict(os.environ, OPENBLAS_CORETYPE=kernels) if kernels else None
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        rows = [row for row in map(json.loads, open(metrics)) if "step" in row]
        return rows, st_io.load(out)
    lr = float(flag("--lr", 0))
    momentum = float(flag("--momentum", 0))  # always given: dp defaults to 0.9
    adamw = flag("--optimizer", "sgd") == "adamw"
    wd = float(flag("--weight-decay", 0.01 if adamw else 0.0))
    damp = float(flag("--dampening", 0.0))

    def make_optimizer(m):
        groups = list(m.parameters())
        if flag("--weight-decay-params", "matrices" if gpt else "all") == "matrices":  # the GPT's default
            groups = ref.matrix_decay_groups(m, wd)
        if adamw:
            betas = tuple(float(b) for b in flag("--betas", "0.9,0.999").split(","))
            return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=float(flag("--eps", 1e-8)), weight_decay=wd)
        return torch.optim.SGD(groups, lr=lr, momentum=momentum, dampening=damp, weight_decay=wd,
                               nesterov="--nesterov" in flags)
    schedule, warmup, min_lr = flag("--lr-schedule", "constant"), int(flag("--warmup-steps", 0)), float(flag("--min-lr", 0))
    clip = float(flag("--clip-grad-norm", 0))
    accumulate = int(flag("--accumulate", 1))  # batches (micro-batches) per step
    smoothing = float(flag("--label-smoothing", 0))
    batches = steps * accumulate
    if gpt:
        tokens = DATA["tokens"]
        # --no-shuffle: sample j of batch s is the window starting at token (s·B + j)·T.
        starts = [[(s * batch + j) * context for j in range(batch)] for s in range(batches)]
        windows = [(torch.stack([tokens[a:a + context] for a in st]),
                    torch.stack([tokens[a + 1:a + context + 1] for a in st])) for st in starts]
    else:
        if tensors:
            x_all, y_all = write_tensor_data(data_dir, input_size(model_name), batch * batches)
        else:
            images, labels = DATA["cifar" if cifar else "mnist"]
            x_all, y_all = ref.normalise(images), labels.long()
        windows = [(x_all[s * batch:(s + 1) * batch], y_all[s * batch:(s + 1) * batch]) for s in range(batches)]
    def reference(dtype, moved_by=None):
        """PyTorch's DataParallel step from the same weights (with moved_by, a seed: each weight
        scaled by (1 + 1e-6·r), r uniform in [-1, 1]): per-step losses, the gradient norms before
        clipping, the final state."""
        m = copy.deepcopy(model).to(dtype)
        if moved_by is not None:
            r = torch.Generator().manual_seed(moved_by)
            with torch.no_grad():
                for p in m.parameters():
                    p.mul_(1 + 1e-6 * (2 * torch.rand(p.shape, generator=r, dtype=p.dtype) - 1))
        opt = make_optimizer(m)
        m.train()
        losses, norms = [], []
        for s in range(steps):
            micro = [(x.to(dtype) if x.is_floating_point() else x, y)
                     for x, y in windows[s * accumulate:(s + 1) * accumulate]]
            for group in opt.param_groups:
                group["lr"] = ref.lr_at(s, steps, lr, schedule, warmup, min_lr)

            def clip_grads():
                params = list(m.parameters())
                norms.append(torch.norm(torch.stack([p.grad.detach().norm(2) for p in params]), 2).item())
                if clip > 0:
                    torch.nn.utils.clip_grad_norm_(params, clip)
            losses.append(ref.dp_accumulated_step(m, opt, micro, lambda b: ref.chunk_sizes(split, b, ndev), clip_grads,
                                                  label_smoothing=smoothing,
                                                  dropout_key=hash_dropout.dropout_key(0, s)))  # dp's --seed 0
        return losses, norms, m.state_dict()

    # Training in float32 is chaotic at the edges: an input of a ReLU (or a max-pool's pair) within
    # rounding of a tie goes either way, and so does the update of an AdamW weight whose gradient
    # is at rounding level. Which ones do depends on the order of every sum (the BLAS kernels,
    # oneDNN's, dp's own), so two correct float32 runs can differ by far more than rounding, by how
    # much depending on the model, the case and the machine. So dp is judged by its distance from
    # PyTorch's float64 run: what rounding allows, plus 4x what float32 itself does to this case on
    # this machine — PyTorch's float32 run's distance from float64, and how far PyTorch's float32
    # run moves when its start moves by 1e-6 relative (two draws: `moved`), each measured here, per
    # step and per tensor. 1e-6 because summing a thousand terms in another order moves a result by
    # about that much (√1000 roundings): the draws flip at least as many near-ties as dp's other
    # summation order does. A case whose spread would swallow the check is not well posed: it runs
    # fewer steps or larger chunks (the cases above), it does not get a wider bound.
    #
    # A flip in dp's run that no draw of PyTorch's showed can still go further; so a run that fails
    # is run again with another kernel set, which sums in another order: a flip does not come back,
    # a wrong step does. The second run must pass on its own.
    loss32, norms32, state32 = reference(torch.float32)
    loss64, norms64, state64 = reference(torch.float64)
    moved = [reference(torch.float32, moved_by=1000 * idx + draw) for draw in (1, 2)]
    loss_spread = [max(abs(m[0][s] - loss32[s]) for m in moved) for s in range(steps)]
    norm_spread = [max(abs(m[1][s] - norms32[s]) for m in moved) for s in range(steps)]
    label = f"{model_name} host:{ndev} batch {batch} split {split}" + (" in-replica" if "in-replica" in flags else "")

    def check(rows, got):
        """Raises AssertionError where dp's run is not PyTorch's step; returns the worst weight error."""
        def close(value, exact, f32, moved_spread, rel, what):
            allowed = rel * max(1.0, abs(exact)) + 4 * abs(f32 - exact) + 4 * moved_spread
            assert abs(value - exact) <= allowed, (f"{label}: {what} {value} != PyTorch {exact} (float32: {f32}, "
                                                   f"moved by a rounding: ±{moved_spread:.2e})")
        assert len(rows) == steps, f"{label}: {len(rows)} steps logged"
        for s, row in enumerate(rows):
            sizes = [0] * ndev  # per device, the samples of every micro-batch of the step
            for _, y in windows[s * accumulate:(s + 1) * accumulate]:
                sizes = [a + b for a, b in zip(sizes, ref.chunk_sizes(split, len(y), ndev))]
            assert row["chunks"] == sizes, f"{label}: step {s + 1}: chunks {row['chunks']} != {sizes}"
            step_lr = ref.lr_at(s, steps, lr, schedule, warmup, min_lr)
            assert abs(row["lr"] - step_lr) <= 1e-6 * max(1e-3, step_lr), f"{label}: step {s + 1}: lr {row['lr']} != {step_lr}"
            close(row["loss"], loss64[s], loss32[s], loss_spread[s], 1e-4, f"step {s + 1} loss")
            # the norm of a sum of thousands of float32 products: 4e-4 of it is rounding's share
            close(row["grad_norm"], norms64[s], norms32[s], norm_spread[s], 4e-4, f"step {s + 1} grad norm")
        worst = own = 0.0
        assert set(got) == set(state64), f"{label}: names {sorted(got)} != {sorted(state64)}"
        for k, w in state64.items():
            g, w32 = got[k], state32[k]
            assert g.shape == w.shape and g.dtype == w32.dtype, f"{label}: {k} {g.shape}/{g.dtype} vs {w.shape}/{w32.dtype}"
            if w.dtype == torch.int64:
                assert torch.equal(g, w), f"{label}: {k} {g} != {w}"
                continue
            err = (g.double() - w).abs()
            worst = max(worst, err.max().item() / max(1.0, w.abs().max().item()))
            # Per tensor: rounding's share, and 4x float32's own spread in this tensor: the float32
            # run's largest distance from float64, and how far a rounding at the start moves it.
            spread = (w32.double() - w).abs().max().item()
            spread_moved = max((m[2][k].double() - w32.double()).abs().max().item() for m in moved)
            own = max(own, (spread + spread_moved) / max(1.0, w.abs().max().item()))
            far = err > (1e-4 if adamw else 2e-5) + 1e-4 * w.abs() + 4 * spread + 4 * spread_moved
            if adamw:
                # AdamW divides each update by √v: an element whose gradient is at rounding level
                # moves by up to ~lr either way. A few such elements may be far; a wrong update
                # (decay, bias correction, a moment) moves them all.
                assert int(far.sum()) <= max(4, far.numel() // 100), \
                    f"{label}: {k}: {int(far.sum())} of {far.numel()} differ, by up to {err.max().item()}"
                # (A buffer follows the weights: BatchNorm's running variance moves with them as far
                # as PyTorch's own float32 run moves it from float64.)
                assert err.max().item() <= 2 * steps * lr + 4 * spread + 4 * spread_moved, \
                    f"{label}: {k} differs by {err.max().item()} (float32 run: {spread}, moved: {spread_moved})"
            else:
                assert not bool(far.any()), (f"{label}: {k} differs by {err.max().item()} (float32 run: {spread}, "
                                             f"moved by a rounding: {spread_moved})")
        return worst, own

    rows, got = run_dp("")
    try:
        worst, own = check(rows, got)
    except AssertionError as first:
        kernels = "Nehalem" if os.environ.get("OPENBLAS_CORETYPE") == "Sandybridge" else "Sandybridge"
        rows, got = run_dp("-again", kernels)
        try:
            worst, own = check(rows, got)
        except AssertionError:
            raise first from None
        print(f"note {label}: the first run failed ({first}); run again with OpenBLAS's {kernels} kernels it passes, "
              "so it was a rounding flip")
    if is_file_model(model_name):  # the saved file loads as it is into the module it was exported from
        got_with_versions = collections.OrderedDict(got)
        # (with the module's own version metadata, as a state_dict() carries it: MNASNet refuses a
        # dict without it, whatever its tensors)
        got_with_versions._metadata = getattr(model.state_dict(), "_metadata", None)
        copy.deepcopy(model).load_state_dict(got_with_versions, strict=True)
    if model_name == "resnet18":
        # The saved file loads as it is into torchvision's model (CIFAR stem), strict=True.
        import torchvision
        tv = torchvision.models.resnet18(num_classes=10)
        tv.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        tv.maxpool = torch.nn.Identity()
        tv.load_state_dict(got, strict=True)
    print(f"ok  {label}: {steps} steps, losses {['%.5f' % row['loss'] for row in rows]}, worst weight error "
          f"{worst:.2e} (from float64; float32's own spread {own:.1e}, the loss's {max(loss_spread):.1e})")


def continue_in_torch(dp, work, optimizer, flags, steps=6, at=3):
    """dp's checkpoint at step `at` (model.safetensors, optimizer.safetensors, state.json) loads into
    a torch model and torch.optim optimizer, which then continue exactly as dp continues."""
    ck = os.path.join(work, f"ck-{optimizer}")
    out = os.path.join(work, f"cont-{optimizer}.safetensors")
    batch, ndev, split = 12, 3, "chunks:2,7,3"
    subprocess.run([dp, "train", "--model", "mlp", "--data", os.path.join(work, "mnist"), "--devices", f"host:{ndev}",
                    "--batch", str(batch), "--split", split, "--steps", str(steps), "--no-shuffle", "--optimizer",
                    optimizer, "--checkpoint", ck, "--checkpoint-every", str(at), "--keep-checkpoints", "5",
                    "--save", out] + flags, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    step_dir = os.path.join(ck, f"step-{at:08d}")
    model = ref.make_model("mlp")
    model.load_state_dict(st_io.load(os.path.join(step_dir, "model.safetensors")), strict=True)
    saved = st_io.load(os.path.join(step_dir, "optimizer.safetensors"))
    state = json.load(open(os.path.join(step_dir, "state.json")))
    lr = float(flags[flags.index("--lr") + 1])
    if optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        per = lambda n: {"step": torch.tensor(float(state["optimizer_steps"])), "exp_avg": saved["exp_avg." + n],
                         "exp_avg_sq": saved["exp_avg_sq." + n]}
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=float(flags[flags.index("--momentum") + 1]))
        per = lambda n: {"momentum_buffer": saved["momentum_buffer." + n]}
    sd = opt.state_dict()
    sd["state"] = {i: per(n) for i, (n, _) in enumerate(model.named_parameters())}
    opt.load_state_dict(sd)
    images, labels = DATA["mnist"]
    x_all, y_all = ref.normalise(images), labels.long()
    model.train()
    for s in range(at, steps):
        x, y = x_all[s * batch:(s + 1) * batch], y_all[s * batch:(s + 1) * batch]
        ref.dp_step(model, opt, x, y, ref.chunk_sizes(split, len(y), ndev))
    got = st_io.load(out)
    worst = max((got[k] - w).abs().max().item() for k, w in model.state_dict().items())
    assert worst < 1e-4, f"{optimizer}: torch continuing from dp's checkpoint differs by {worst}"
    print(f"ok  {optimizer}: dp's step-{at} checkpoint continued in torch.optim for {steps - at} steps, worst {worst:.2e}")


def write_tensor_data(directory, size, count):
    """A float32 tensor file of `count` 3xSxS samples (standard normal: already normalised) and
    their labels, which dp takes as they are (data/tensor_files.hpp); the same tensors, for PyTorch."""
    import numpy as np
    if not os.path.exists(directory):
        g = torch.Generator().manual_seed(size)
        x = torch.randn(max(count, 64), 3, size, size, generator=g)
        y = torch.randint(0, 10, (x.shape[0],), generator=g)
        os.makedirs(directory)
        np.save(os.path.join(directory, "train_images.npy"), x.numpy())
        np.save(os.path.join(directory, "train_labels.npy"), y.numpy())
    x = torch.from_numpy(np.load(os.path.join(directory, "train_images.npy")))
    y = torch.from_numpy(np.load(os.path.join(directory, "train_labels.npy")))
    if x.shape[0] < count:
        raise ValueError(f"{directory}: {x.shape[0]} samples, {count} wanted")
    return x, y


def main(cases=None, continue_checks=True, cifar_samples=60):
    cases = CASES if cases is None else cases
    dp = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as work:
        g = torch.Generator().manual_seed(7)
        images, labels = ref.random_mnist_dir(os.path.join(work, "mnist"), 200, 20, g)
        cifar_images = (torch.rand(cifar_samples, 3, 32, 32, generator=g) * 255).to(torch.uint8)
        cifar_labels = torch.randint(0, 10, (cifar_samples,), generator=g)
        cifar = os.path.join(work, "cifar")
        os.makedirs(cifar)
        ref.write_cifar(cifar_images, cifar_labels, os.path.join(cifar, "data_batch_1.bin"))
        ref.write_cifar(cifar_images[:10], cifar_labels[:10], os.path.join(cifar, "test_batch.bin"))
        tokens = torch.randint(0, 100, (2000,), generator=g)
        os.makedirs(os.path.join(work, "tokens"))
        for name, part in (("train.bin", tokens), ("val.bin", tokens[:300])):
            with open(os.path.join(work, "tokens", name), "wb") as f:
                f.write(part.numpy().astype("<u2").tobytes())  # nanoGPT's raw uint16 layout
        global DATA
        DATA = {"mnist": (images, labels), "cifar": (cifar_images, cifar_labels), "tokens": tokens}
        for i, case in enumerate(cases):
            run_case(dp, work, case, i)
        if continue_checks:
            continue_in_torch(dp, work, "sgd", ["--lr", "0.05", "--momentum", "0.9"])
            continue_in_torch(dp, work, "adamw", ["--lr", "0.002", "--momentum", "0"])
    print(f"{len(cases) + (2 if continue_checks else 0)} passed, 0 failed")


if __name__ == "__main__":
    main()
