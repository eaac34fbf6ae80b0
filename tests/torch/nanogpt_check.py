"""tools/convert_nanogpt.py against nanoGPT's own checkpoints: a ckpt.pt as train.py writes it (the
model under torch.compile's `_orig_mod.` prefix, lm_head tied to wte, the causal-mask buffers,
model_args) and a bare state dict of a bias=False model. dp eval on the converted file gives the
validation loss PyTorch computes for the same windows.

usage: nanogpt_check.py DP_BINARY   (exit 77 = skipped: no torch)
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference as ref  # noqa: E402

DP = os.path.abspath(sys.argv[1])
CONVERT = os.path.join(HERE, "..", "..", "tools", "convert_nanogpt.py")
VOCAB, T, LAYERS, HEADS, DIM, WINDOWS = 128, 16, 2, 2, 32, 8
failed = 0


def check(name, cond, detail=""):
    global failed
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f" {detail}"))
    failed += 0 if cond else 1


def torch_loss(model, val):
    """The mean cross-entropy over dp's evaluation windows (evenly spaced starts, as
    data/token_loader.cpp's evaluation_starts)."""
    last = len(val) - T - 1
    n = min(WINDOWS, last + 1)
    starts = [0] if n == 1 else [k * last // (n - 1) for k in range(n)]
    x = torch.stack([val[s:s + T] for s in starts])
    y = torch.stack([val[s + 1:s + T + 1] for s in starts])
    with torch.no_grad():
        logits = model(x)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)).item()


with tempfile.TemporaryDirectory() as tmp:
    g = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, 100, (3000,), generator=g)
    data = os.path.join(tmp, "tokens")
    os.makedirs(data)
    for name, part in (("train.bin", tokens), ("val.bin", tokens[2000:])):
        with open(os.path.join(data, name), "wb") as f:
            f.write(part.numpy().astype("<u2").tobytes())
    val = tokens[2000:].long()

    for case in ("ckpt.pt of train.py", "state dict, bias=False"):
        torch.manual_seed(11)
        model = ref.make_model("gpt", dict(vocab=VOCAB, context=T, layers=LAYERS, heads=HEADS, dim=DIM))
        model.lm_head.weight = model.transformer.wte.weight  # nanoGPT ties them
        with torch.no_grad():  # trained-looking LayerNorms and biases, not the initial ones and zeros
            for name, p in model.named_parameters():
                if "ln_" in name or name.endswith("bias"):
                    p.add_(0.1 * torch.randn(p.shape, generator=g))
        sd = model.state_dict()
        if case.startswith("ckpt"):
            sd = {"_orig_mod." + k: v for k, v in sd.items()}
            for i in range(LAYERS):  # nanoGPT without flash attention registers its causal mask
                sd[f"_orig_mod.transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
            ckpt = {"model": sd, "model_args": dict(n_layer=LAYERS, n_head=HEADS, n_embd=DIM, block_size=T,
                                                    vocab_size=VOCAB, bias=True, dropout=0.1),
                    "iter_num": 100, "best_val_loss": torch.tensor(4.2)}
            extra = []
        else:
            with torch.no_grad():  # bias=False is the same model with zero biases
                for name, p in model.named_parameters():
                    if name.endswith("bias"):
                        p.zero_()
            ckpt = {k: v for k, v in sd.items() if not k.endswith("bias")}
            extra = ["--heads", str(HEADS)]
        path, out = os.path.join(tmp, "ckpt.pt"), os.path.join(tmp, "gpt.safetensors")
        torch.save(ckpt, path)
        p = subprocess.run([sys.executable, CONVERT, path, out] + extra, capture_output=True, text=True)
        check(f"{case}: converted", p.returncode == 0 and "dp flags:" in p.stdout, p.stderr + p.stdout)
        if p.returncode != 0:
            continue
        flags = p.stdout.split("dp flags: ")[1].split()
        # ckpt.pt's model_args say dropout 0.1: its flag comes along (dp eval does not drop).
        dropout = ["--dropout", "0.1"] if case.startswith("ckpt") else []
        check(f"{case}: the flags of its sizes", flags == ["--model", "gpt", "--gpt-layers", str(LAYERS),
                                                         "--gpt-heads", str(HEADS), "--gpt-dim", str(DIM),
                                                         "--context", str(T), "--vocab", str(VOCAB)] + dropout, flags)
        js = os.path.join(tmp, "eval.json")
        e = subprocess.run([DP, "eval"] + flags + ["--data", data, "--devices", "host:1", "--batch", "4",
                                                   "--eval-windows", str(WINDOWS), "--weights", out, "--json", js],
                           capture_output=True, text=True)
        check(f"{case}: dp eval loads it", e.returncode == 0, e.stderr)
        if e.returncode == 0:
            got, want = json.load(open(js))["test_loss"], torch_loss(model, val)
            check(f"{case}: dp's validation loss is PyTorch's", abs(got - want) <= 1e-5 * max(1.0, abs(want)),
                  (got, want))

    p = subprocess.run([sys.executable, CONVERT, path, path], capture_output=True, text=True)
    check("refuses to overwrite the checkpoint", p.returncode != 0 and "overwrite" in p.stderr, p.stderr)
    bare = os.path.join(tmp, "bare.pt")
    torch.save({k: v for k, v in model.state_dict().items()}, bare)
    p = subprocess.run([sys.executable, CONVERT, bare, out], capture_output=True, text=True)
    check("a bare state dict needs --heads", p.returncode != 0 and "--heads" in p.stderr, p.stderr)

print(f"{'all passed' if not failed else f'{failed} failed'}")
sys.exit(1 if failed else 0)
