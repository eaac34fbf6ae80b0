"""nanoGPT's model.py GPT as a model file against dp's own --model gpt: the GPT written as model.py
writes it (tests/torch/nanogpt_model.py: its LayerNorm, the explicit attention path with a causal
tril buffer, masked_fill, softmax and dropout, forward(idx, targets) computing its loss), untied,
exported with tools/export_model.py --input tokens:T --weights; dp trains the file and --model gpt
from those weights on the same token data, split unevenly over devices, without dropout and with
it; and model.py's other path, F.scaled_dot_product_attention(is_causal=True) with dropout (PyTorch
2.x's function; on 1.13, which has none, a stand-in with its signature). Per-step losses and every weight after the steps agree to float32 rounding: the file's matmul,
scale, masked_fill, softmax and dropout nodes compute what the fused attention kernel does, in the
same order (the same exp, sums and masks), but the kernel scales q·kᵀ inside the GEMM (alpha),
the file after it — the same bits with OpenBLAS's SkylakeX kernels (which apply alpha to the
finished sum), not with its Haswell kernels (which fold it into their FMAs). It reports which.
The tied model is refused, naming both parameters.

usage: nanogpt_export_check.py DP_BINARY   (exit 77 = skipped: no torch)
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
import st_io  # noqa: E402

DP = os.path.abspath(sys.argv[1])
EXPORT = os.path.join(HERE, "..", "..", "tools", "export_model.py")
MODEL = os.path.join(HERE, "nanogpt_model.py")
VOCAB, T, LAYERS, HEADS, DIM = 96, 16, 2, 2, 32
failed = 0


def check(name, cond, detail=""):
    global failed
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f" {detail}"))
    failed += 0 if cond else 1


def losses(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r["loss"] for r in rows if "loss" in r]


with tempfile.TemporaryDirectory() as tmp:
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, VOCAB, (4000,), generator=g)
    data = os.path.join(tmp, "tokens")
    os.makedirs(data)
    for name, part in (("train.bin", tokens), ("val.bin", tokens[3000:])):
        with open(os.path.join(data, name), "wb") as f:
            f.write(part.numpy().astype("<u2").tobytes())

    # model.py's explicit attention, without dropout and with it; its other path,
    # F.scaled_dot_product_attention(is_causal=True) (PyTorch 2.x's; a stand-in with its signature
    # on 1.13), exported as the ops of its definition.
    for spec, dropout in (("untied", 0.0), ("untied", 0.1), ("flash_untied", 0.1)):
        config = dict(block_size=T, vocab_size=VOCAB, n_layer=LAYERS, n_head=HEADS, n_embd=DIM, dropout=dropout)
        model_file = os.path.join(tmp, f"{spec}{dropout}.json")
        weights = os.path.join(tmp, f"{spec}{dropout}.safetensors")
        r = subprocess.run([sys.executable, EXPORT, f"{MODEL}:{spec}", "--kwargs", json.dumps(config),
                            "--input", f"tokens:{T}", "--out", model_file, "--weights", weights],
                           capture_output=True, text=True)
        case = f"{'explicit attention' if spec == 'untied' else 'scaled_dot_product_attention'}, dropout {dropout}"
        check(f"{case}: exports", r.returncode == 0, r.stderr)
        if r.returncode:
            continue
        check(f"{case}: says dp trains the logits with its own cross-entropy",
              "dp trains its logits with dp's cross-entropy" in r.stdout, r.stdout)
        check(f"{case}: the causal-mask buffers are folded, not state",
              "transformer.h.0.attn.bias" not in st_io.load(weights), "")
        runs = {}
        for label, model_args in (("file", ["--model", model_file]),
                                  ("gpt", ["--model", "gpt", "--vocab", str(VOCAB), "--context", str(T),
                                           "--gpt-layers", str(LAYERS), "--gpt-heads", str(HEADS),
                                           "--gpt-dim", str(DIM), "--dropout", str(dropout)])):
            out, metrics = os.path.join(tmp, f"{label}{spec}{dropout}.safetensors"), os.path.join(tmp, f"{label}.jsonl")
            cmd = [DP, "train", *model_args, "--data", data, "--devices", "host:3", "--batch", "10",
                   "--split", "chunks:5,3,2", "--steps", "4", "--no-shuffle", "--optimizer", "adamw", "--lr", "0.003",
                   "--momentum", "0", "--init", weights, "--save", out, "--metrics", metrics]
            p = subprocess.run(cmd, capture_output=True, text=True)
            check(f"{case}: dp train --model {label} runs", p.returncode == 0, p.stderr[-2000:])
            if p.returncode:
                break
            runs[label] = (losses(metrics), st_io.load(out))
        if len(runs) != 2:
            continue
        (lf, wf), (lg, wg) = runs["file"], runs["gpt"]
        check(f"{case}: per-step losses agree ({'bit for bit' if lf == lg else 'to rounding'})",
              len(lf) == 4 and len(lf) == len(lg) and all(abs(a - b) <= 1e-6 * abs(b) for a, b in zip(lf, lg)),
              f"{lf} vs {lg}")
        check(f"{case}: the same state", sorted(wf) == sorted(wg), f"{sorted(set(wf) ^ set(wg))}")
        differ = [k for k, w in wf.items() if k in wg and not torch.equal(w, wg[k])]
        worst = max((w - wg[k]).abs().max().item() / max(1.0, wg[k].abs().max().item()) for k, w in wf.items())
        moved = max((w - st_io.load(weights)[k]).abs().max().item() for k, w in wf.items())
        check(f"{case}: every weight agrees after 4 steps that moved them up to {moved:.1e} "
              f"({'bit for bit' if not differ else f'{len(differ)} differ, by up to {worst:.1e}'})",
              worst <= 1e-5 and moved > 1e-3)

    r = subprocess.run([sys.executable, EXPORT, f"{MODEL}:make", "--kwargs", json.dumps(
        dict(block_size=T, vocab_size=VOCAB, n_layer=1, n_head=HEADS, n_embd=DIM)), "--input", f"tokens:{T}",
        "--out", os.path.join(tmp, "tied.json")], capture_output=True, text=True)
    check("the tied model is refused, naming both parameters", r.returncode == 2 and "tied" in r.stderr
          and "lm_head.weight" in r.stderr and "transformer.wte.weight" in r.stderr, r.stderr)

print("nanoGPT's model.py as a model file: " + ("all checks passed" if failed == 0 else f"{failed} FAILED"))
sys.exit(1 if failed else 0)
