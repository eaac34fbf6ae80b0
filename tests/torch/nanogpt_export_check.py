"""nanoGPT's model.py GPT as a model file against dp's own --model gpt: the GPT written as model.py
writes it (tests/torch/nanogpt_model.py: its LayerNorm, the explicit attention path with a causal
tril buffer, masked_fill, softmax and dropout, forward(idx, targets) computing its loss), untied,
exported with tools/export_model.py --input tokens:T --weights; dp trains the file and --model gpt
from those weights on the same token data, split unevenly over devices, without dropout and with
it; and model.py's other path, F.scaled_dot_product_attention(is_causal=True) with dropout (PyTorch
2.x's function; on 1.13, which has none, a stand-in with its signature), exported as one node a
layer that dp runs on --model gpt's attention kernels. Per-step losses and every weight after the steps agree to float32 rounding: the file's matmul,
scale, masked_fill, softmax and dropout nodes compute what the fused attention kernel does, in the
same order (the same exp, sums and masks), but the kernel scales q·kᵀ inside the GEMM (alpha),
the file after it — the same bits with OpenBLAS's SkylakeX kernels (which apply alpha to the
finished sum), not with its Haswell kernels (which fold it into their FMAs). It reports which.
model.py's GPT as it is, exported the documented way (`model.py:GPT --config GPTConfig`): tied (one
parameter), its causal masks kept as state, bias=False; dp trains it and what --save writes loads
into GPT(GPTConfig(...)) with load_state_dict(strict=True), the tie intact. (model_file_crosscheck.py
holds the tied model's training against PyTorch's DataParallel step.)

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
    # on 1.13), exported as one scaled_dot_product_attention node a layer.
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
        if spec == "untied":  # (the flash path registers no mask)
            check(f"{case}: the causal-mask buffers are kept as state no node reads",
                  "transformer.h.0.attn.bias" in st_io.load(weights) and '"unread": true' in open(model_file).read())
        else:  # one node a layer, which dp runs on its GPT's attention kernels
            ops = [n["op"] for n in json.load(open(model_file))["nodes"]]
            check(f"{case}: one scaled_dot_product_attention node a layer, no softmax or matmul",
                  ops.count("scaled_dot_product_attention") == LAYERS and "softmax" not in ops and "matmul" not in ops,
                  f"{sorted(set(ops))}")
        # --model gpt has no mask buffers: its start is the same weights without them
        gpt_init = os.path.join(tmp, f"gpt-{spec}{dropout}.safetensors")
        st_io.save({k: v for k, v in st_io.load(weights).items() if not k.endswith(".attn.bias")}, gpt_init)
        runs = {}
        for label, model_args in (("file", ["--model", model_file, "--init", weights]),
                                  ("gpt", ["--model", "gpt", "--vocab", str(VOCAB), "--context", str(T),
                                           "--gpt-layers", str(LAYERS), "--gpt-heads", str(HEADS),
                                           "--gpt-dim", str(DIM), "--dropout", str(dropout), "--init", gpt_init])):
            out, metrics = os.path.join(tmp, f"{label}{spec}{dropout}.safetensors"), os.path.join(tmp, f"{label}.jsonl")
            cmd = [DP, "train", *model_args, "--data", data, "--devices", "host:3", "--batch", "10",
                   "--split", "chunks:5,3,2", "--steps", "4", "--no-shuffle", "--optimizer", "adamw", "--lr", "0.003",
                   "--momentum", "0", "--save", out, "--metrics", metrics]
            p = subprocess.run(cmd, capture_output=True, text=True)
            check(f"{case}: dp train --model {label} runs", p.returncode == 0, p.stderr[-2000:])
            if p.returncode:
                break
            if label == "file" and spec == "flash_untied":  # model.py's split and transposes folded away
                check(f"{case}: dp reads q, k and v where c_attn writes them",
                      f"{LAYERS} attention nodes reading q, k, v where c_attn writes them" in p.stdout + p.stderr,
                      (p.stdout + p.stderr)[:500])
            runs[label] = (losses(metrics), st_io.load(out))
        if len(runs) != 2:
            continue
        (lf, wf), (lg, wg) = runs["file"], runs["gpt"]
        check(f"{case}: per-step losses agree ({'bit for bit' if lf == lg else 'to rounding'})",
              len(lf) == 4 and len(lf) == len(lg) and all(abs(a - b) <= 1e-6 * abs(b) for a, b in zip(lf, lg)),
              f"{lf} vs {lg}")
        check(f"{case}: the same state, and the file's masks", sorted(set(wf) - set(wg)) == sorted(
            k for k in st_io.load(weights) if k.endswith(".attn.bias")), f"{sorted(set(wf) ^ set(wg))}")
        differ = [k for k, w in wf.items() if k in wg and not torch.equal(w, wg[k])]
        worst = max((w - wg[k]).abs().max().item() / max(1.0, wg[k].abs().max().item()) for k, w in wf.items()
                    if k in wg)
        moved = max((w - st_io.load(weights)[k]).abs().max().item() for k, w in wf.items())
        check(f"{case}: every weight agrees after 4 steps that moved them up to {moved:.1e} "
              f"({'bit for bit' if not differ else f'{len(differ)} differ, by up to {worst:.1e}'})",
              worst <= 1e-5 and moved > 1e-3)

    # The exporter's memory follows the model, not its activations: it checks and traces shapes on the
    # meta device. A GPT whose logits are large at T = 1024 (GPT-2's vocabulary, 2 samples: 400 MB a
    # value) exports in under 700 MB resident (2.0 GB when it traced on the CPU; 270 MB now).
    config = dict(block_size=1024, vocab_size=50257, n_layer=1, n_head=2, n_embd=32)
    measure = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); "
               "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    r = subprocess.run([sys.executable, "-c", measure, sys.executable, EXPORT, f"{MODEL}:make", "--kwargs",
                        json.dumps(config), "--input", "tokens:1024", "--out", os.path.join(tmp, "wide.json")],
                       capture_output=True, text=True)
    rc, kib = (int(v) for v in r.stdout.split())
    check(f"a GPT with GPT-2's vocabulary at 1024 tokens exports in {kib / 1024:.0f} MB resident (under 700)",
          rc == 0 and kib < 700 * 1024, r.stdout + r.stderr)

    # model.py's GPT itself, by its config class: tied, with bias and without.
    sys.path.insert(0, os.path.dirname(MODEL))
    import nanogpt_model
    for bias in (True, False):
        config = dict(block_size=T, vocab_size=VOCAB, n_layer=LAYERS, n_head=HEADS, n_embd=DIM, bias=bias)
        case = f"GPT(GPTConfig(bias={bias})), tied"
        model_file, weights = os.path.join(tmp, f"tied{bias}.json"), os.path.join(tmp, f"tied{bias}.safetensors")
        r = subprocess.run([sys.executable, EXPORT, f"{MODEL}:GPT", "--config", "GPTConfig", "--kwargs",
                            json.dumps(config), "--input", f"tokens:{T}", "--out", model_file, "--weights", weights],
                           capture_output=True, text=True)
        check(f"{case}: exports, saying which names are one parameter", r.returncode == 0 and
              "lm_head.weight is transformer.wte.weight" in r.stdout, r.stderr + r.stdout)
        if r.returncode:
            continue
        out = os.path.join(tmp, f"trained{bias}.safetensors")
        p = subprocess.run([DP, "train", "--model", model_file, "--data", data, "--devices", "host:2", "--batch", "6",
                            "--steps", "3", "--init", weights, "--save", out], capture_output=True, text=True)
        check(f"{case}: dp trains it", p.returncode == 0, p.stderr[-2000:])
        if p.returncode:
            continue
        gpt = nanogpt_model.GPT(nanogpt_model.GPTConfig(**config))
        saved = st_io.load(out)
        try:
            gpt.load_state_dict(saved, strict=True)
            loaded = ""
        except RuntimeError as e:
            loaded = str(e)
        check(f"{case}: what --save wrote loads into GPT with strict=True (every key, the masks included)", not loaded,
              loaded)
        check(f"{case}: the tie holds, with the trained values", gpt.lm_head.weight is gpt.transformer.wte.weight
              and torch.equal(saved["lm_head.weight"], saved["transformer.wte.weight"])
              and not torch.equal(saved["lm_head.weight"], st_io.load(weights)["lm_head.weight"]))

    # --attention fused on the flash path's nodes: heads of 32 in bf16 take the flash kernels as
    # --model gpt's blocks do (the same kernels: the same bits); a file whose attention was exported
    # as its ops has no node to take them, and says so.
    wide = dict(block_size=T, vocab_size=VOCAB, n_layer=LAYERS, n_head=2, n_embd=64, dropout=0.0)
    flash_file, flash_weights = os.path.join(tmp, "flash64.json"), os.path.join(tmp, "flash64.safetensors")
    r = subprocess.run([sys.executable, EXPORT, f"{MODEL}:flash_untied", "--kwargs", json.dumps(wide), "--input",
                        f"tokens:{T}", "--out", flash_file, "--weights", flash_weights], capture_output=True, text=True)
    check("heads of 32 on model.py's flash path: exports", r.returncode == 0, r.stderr)
    runs = {}
    for label, model_args in (("file", ["--model", flash_file]),
                              ("gpt", ["--model", "gpt", "--vocab", str(VOCAB), "--context", str(T), "--gpt-layers",
                                       str(LAYERS), "--gpt-heads", "2", "--gpt-dim", "64"])):
        for attention in ("explicit", "fused"):
            out, metrics = (os.path.join(tmp, f"{label}-{attention}{ext}") for ext in (".safetensors", ".jsonl"))
            p = subprocess.run([DP, "train", *model_args, "--init", flash_weights, "--data", data, "--devices", "host:2",
                                "--batch", "4", "--steps", "3", "--no-shuffle", "--precision", "bf16", "--attention",
                                attention, "--optimizer", "adamw", "--lr", "0.003", "--momentum", "0", "--save", out,
                                "--metrics", metrics], capture_output=True, text=True)
            check(f"--model {label} --attention {attention} in bf16 trains", p.returncode == 0 and
                  ("fused attention" in p.stderr) == (attention == "fused"), p.stderr[-2000:])
            if p.returncode == 0:
                runs[(label, attention)] = (losses(metrics), st_io.load(out))
    if len(runs) == 4:
        (lf, wf), (lg, wg) = runs[("file", "fused")], runs[("gpt", "fused")]
        check("--attention fused: the file's nodes train as --model gpt's blocks, losses and weights bit for bit",
              lf == lg and all(torch.equal(w, wg[k]) for k, w in wf.items()), f"{lf} vs {lg}")
        (le, we), (lge, wge) = runs[("file", "explicit")], runs[("gpt", "explicit")]
        check("--attention explicit in bf16: the file's node trains as --model gpt's blocks, bit for bit",
              le == lge and all(torch.equal(w, wge[k]) for k, w in we.items()), f"{le} vs {lge}")
        check("--attention fused: the flash kernels taken (the explicit losses within bfloat16's precision, "
              "not their bits)", lf != le and all(abs(a - b) <= 2e-2 * abs(b) for a, b in zip(lf, le)), f"{lf} vs {le}")
    p = subprocess.run([DP, "train", "--model", os.path.join(tmp, "untied0.0.json"), "--data", data, "--steps", "1",
                        "--attention", "fused"], capture_output=True, text=True)
    check("--attention fused on a file whose attention is its ops: refused, saying why",
          p.returncode == 2 and "has no scaled_dot_product_attention node" in p.stderr, p.stderr[-2000:])

print("nanoGPT's model.py as a model file: " + ("all checks passed" if failed == 0 else f"{failed} FAILED"))
sys.exit(1 if failed else 0)
