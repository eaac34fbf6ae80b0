"""A nanoGPT checkpoint (train.py's ckpt.pt, or a state dict saved with torch.save) as a safetensors
file dp loads — `dp train --init` to fine-tune it, `dp eval --weights` to measure it or sample from
it — and the dp flags of its sizes.

usage: /usr/bin/python3 tools/convert_nanogpt.py CKPT OUT.safetensors [--heads N]

On the way: torch.compile's `_orig_mod.` prefix comes off; the causal-mask buffers (`attn.bias` of
nanoGPT without flash attention) are dropped; lm_head, tied to wte in nanoGPT, is written as a copy
of its own (dp's lm_head is untied: the same function, until fine-tuning moves the two apart); a
model made with bias=False gets zero biases (the same function; dp trains them if it fine-tunes);
every tensor is written in float32. The flags include the checkpoint's dropout (model_args.dropout,
when above 0): dp train drops as nanoGPT did when it fine-tunes; evaluation and sampling never drop.
--heads is needed only for a bare state dict (ckpt.pt says n_head).
A checkpoint is a pickle, unpickled as nanoGPT's sample.py does: convert only files you trust.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import st_io  # noqa: E402


def convert(ckpt, heads=None):
    """dp's state dict (name -> float32 tensor) and the flags of its sizes, from a loaded ckpt.pt."""
    sd = ckpt["model"] if isinstance(ckpt, dict) and "model" in ckpt else ckpt
    args = ckpt.get("model_args", {}) if isinstance(ckpt, dict) else {}
    if not isinstance(sd, dict) or not sd:
        raise SystemExit("error: no state dict in the checkpoint (expected train.py's ckpt.pt or a state dict)")
    out = {}
    for name, t in sd.items():
        name = name[len("_orig_mod."):] if name.startswith("_orig_mod.") else name
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue  # the causal mask, not a parameter
        out[name] = t.detach().to(torch.float32).clone()
    if "transformer.wte.weight" not in out or "transformer.wpe.weight" not in out:
        raise SystemExit("error: not a nanoGPT GPT: no transformer.wte.weight / transformer.wpe.weight")
    vocab, dim = out["transformer.wte.weight"].shape
    context = out["transformer.wpe.weight"].shape[0]
    layers = 1 + max((int(n.split(".")[2]) for n in out if n.startswith("transformer.h.")), default=-1)
    out.setdefault("lm_head.weight", out["transformer.wte.weight"].clone())  # tied: the same values
    # bias=False: every Linear and LayerNorm without a bias, which is a zero bias.
    for i in range(layers):
        for part, size in (("ln_1", dim), ("attn.c_attn", 3 * dim), ("attn.c_proj", dim), ("ln_2", dim),
                           ("mlp.c_fc", 4 * dim), ("mlp.c_proj", dim)):
            out.setdefault(f"transformer.h.{i}.{part}.bias", torch.zeros(size))
    out.setdefault("transformer.ln_f.bias", torch.zeros(dim))
    heads = heads or args.get("n_head")
    if not heads:
        raise SystemExit("error: the checkpoint does not say its heads (no model_args.n_head): give --heads N")
    if dim % heads:
        raise SystemExit(f"error: {heads} heads do not divide the width {dim}")
    flags = ["--model", "gpt", "--gpt-layers", str(layers), "--gpt-heads", str(heads), "--gpt-dim", str(dim),
             "--context", str(context), "--vocab", str(vocab)]
    if float(args.get("dropout", 0) or 0) > 0:
        flags += ["--dropout", f"{float(args['dropout']):g}"]
    return out, flags


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ckpt")
    p.add_argument("out")
    p.add_argument("--heads", type=int, default=None, help="attention heads, when the checkpoint does not say")
    a = p.parse_args()
    if os.path.abspath(a.ckpt) == os.path.abspath(a.out):
        raise SystemExit("error: the output would overwrite the checkpoint")
    # Unpickled as nanoGPT's own sample.py does (PyTorch 1.13's weights-only loader refuses the floats
    # in its model_args): convert only checkpoints you trust.
    ckpt = torch.load(a.ckpt, map_location="cpu")
    tensors, flags = convert(ckpt, a.heads)
    tmp = a.out + ".tmp"
    st_io.save(tensors, tmp)
    os.replace(tmp, a.out)  # atomically: an interrupted run leaves no half-written file
    print(f"wrote {a.out}: {len(tensors)} tensors, {sum(t.numel() for t in tensors.values())} parameters")
    print("dp flags: " + " ".join(flags))


if __name__ == "__main__":
    main()
