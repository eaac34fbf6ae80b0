"""dp plan --roofline GPU: the table (each phase's ops, each device's total, the step's bound and the
samples and tokens a second it allows), the JSON report, --compare's column, the GPUs by name or
by their peaks and the refusals; and every op of every model counted: the built-ins and model files
of every kind of op dp runs (ViT, Swin, Swin V2, MaxViT, ConvNeXt, nanoGPT's tied GPT, the
convolutional joins, gates, pools, norms and activations), under each sync mode and bf16, with no
op left uncounted.

usage: test_roofline.py DP_BINARY
"""
import copy
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from checks import Cli  # noqa: E402

CLI = Cli()
check, run, expect = CLI.check, CLI.run, CLI.expect

with tempfile.TemporaryDirectory() as tmp:
    at = lambda name: os.path.join(tmp, name)  # noqa: E731

    # ---- the table and the report, on the built-in GPT
    gpt = ["--model", "gpt", "--gpt-layers", "2", "--gpt-dim", "128", "--context", "64", "--batch", "16"]
    rc, out, err = run(["plan"] + gpt + ["--devices", "meta:2", "--roofline", "H200", "--json", at("r.json")])
    check("plan --roofline H200 prints the GPU's peaks, the phases' ops and the step's bound",
          rc == 0 and "roofline on H200: 989 TFLOP/s bf16/fp16 matrix products" in out and "4.8 TB/s memory" in out
          and "a lower bound, not a prediction" in out and "linear_forward (fp32)" in out
          and "attention_backward (fp32)" in out and "adamw_update" in out and "step lower bound:" in out
          and "tokens/s" in out and "not counted" not in out, out + err)
    lines = out.splitlines()
    rows = [line for line in lines if line.startswith(("forward ", "backward ", "update ", "scatter ", "gather ",
                                                       "replicate ", "loss ", "reduce ", "load "))]
    order = ["load", "scatter", "replicate", "forward", "gather", "loss", "backward", "reduce", "update"]
    phases = [order.index(row.split()[0]) for row in rows]
    check("the rows follow the step's phases", rows and phases == sorted(phases), "\n".join(rows))
    r = json.load(open(at("r.json")))["roofline"] if os.path.exists(at("r.json")) else {}
    check("--json holds the roofline: the GPU, each device's rows, the step's bound",
          r.get("gpu", {}).get("name") == "H200" and len(r.get("devices", [])) == 2
          and r.get("step_seconds", 0) > 0 and r.get("tokens_per_second", 0) > 0
          and abs(r["samples_per_second"] * r["step_seconds"] - 16) < 1e-6, json.dumps(r)[:500])
    if r:
        d0 = r["devices"][0]
        close = lambda a, b: abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-12)  # noqa: E731
        check("a device's serial seconds are its rows' sum, split by what bounds each call and by stream; "
              "its bound the longer stream",
              close(sum(row["seconds"] for row in d0["rows"]), d0["serial_seconds"])
              and close(d0["compute_bound_seconds"] + d0["memory_bound_seconds"] + d0["link_bound_seconds"],
                        d0["serial_seconds"])
              and close(d0["kernel_seconds"] + d0["link_seconds"], d0["serial_seconds"])
              and d0["seconds"] == max(d0["kernel_seconds"], d0["link_seconds"])
              and d0["link_seconds"] > 0, json.dumps(d0)[:500])
        # The forward's linears on device 0 (8 samples of 64 tokens): 2·tokens·(12·L·C² + C·V) + bias adds.
        tokens, L, C, V = 8 * 64, 2, 128, 256
        fwd = sum(row["flops"] for row in d0["rows"] if row["phase"] == "forward" and row["op"] == "linear_forward")
        check("device 0's forward linears are the GPT's closed form",
              fwd == 2 * tokens * (12 * L * C * C + C * V) + tokens * L * 9 * C, fwd)
    rc, out16, err = run(["plan"] + gpt + ["--devices", "meta:2", "--roofline", "H200", "--precision", "bf16",
                                            "--json", at("r16.json")])
    r16 = json.load(open(at("r16.json")))["roofline"] if rc == 0 else {}
    check("in bf16 the matrix products run on the tensor cores: a shorter bound",
          rc == 0 and "linear_forward (16-bit)" in out16 and r16 and r and r16["step_seconds"] < r["step_seconds"],
          out16[-800:] + err)
    rc, out, err = run(["plan"] + gpt + ["--devices", "meta:2", "--roofline", "bf16=100T,fp32=10T,memory=1T,link=50G"])
    check("peaks given instead of a name", rc == 0 and "roofline on given peaks: 100 TFLOP/s" in out, out[-600:] + err)
    rc, out_slow, err = run(["plan"] + gpt + ["--devices", "meta:2", "--roofline", "H200,memory=1T"])
    check("a known GPU with its memory slower: named as changed", rc == 0 and "roofline on H200 (changed)" in out_slow,
          out_slow[-600:] + err)

    rc, out, err = run(["plan", "--model", "resnet8", "--devices", "meta:4", "--batch", "64", "--compare",
                        "--roofline", "A100", "--json", at("c.json")])
    rows = json.load(open(at("c.json")))["compare"] if rc == 0 else []
    check("--compare --roofline: a roofline step for every strategy, in the table and the JSON",
          rc == 0 and "roofline step" in out and len(rows) == 24  # recompute too: resnet8 has blocks
          and all(row.get("roofline", {}).get("step_seconds", 0) > 0 for row in rows), out[-1500:] + err)

    expect("an unknown GPU is refused before planning, naming the known ones",
           ["plan", "--model", "mlp", "--roofline", "B9000"], 2, "--roofline B9000: unknown GPU 'B9000' (a GPU: A100")
    expect("peaks without a name must all be given",
           ["plan", "--model", "mlp", "--roofline", "bf16=1T"], 2, "give every peak")
    expect("a peak that is not a rate", ["plan", "--model", "mlp", "--roofline", "H100,memory=fast"], 2,
           "memory=fast is not a number")

    # ---- every op counted: the built-ins, under each strategy
    for model, extra in [("mlp", []), ("convnet", []), ("resnet8", []), ("resnet18", ["--batch", "8"]),
                         ("gpt", ["--gpt-layers", "1", "--gpt-dim", "64", "--context", "32", "--batch", "8"])]:
        for sync in ["reduce", "allreduce", "zero3"]:
            for precision in ["fp32", "bf16"]:
                args = ["plan", "--model", model, "--devices", "meta:3", "--sync", sync, "--precision", precision,
                        "--roofline", "H100"] + (extra or ["--batch", "12"])
                rc, out, err = run(args)
                check(f"every op counted: {model}, {sync}, {precision}",
                      rc == 0 and "step lower bound" in out and "not counted" not in out, out[-800:] + err)

    # ---- every op counted: model files of every kind of op the exporter writes
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
        print("SKIP (model files): PyTorch or torchvision is not installed")
    if have_torch:
        sys.path.insert(0, os.path.join(HERE, "..", "torch"))
        sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
        import export_model
        import file_models
        for name in ["vit_tiny", "swin_small", "swin_v2_small", "maxvit_small", "convnext_small", "joins", "gates",
                     "pools", "norms", "tiny_activations", "nanogpt_tied", "nanogpt_nobias"]:
            context = file_models.token_context(name)
            kind, shape = ("tokens", [context]) if context else ("image", [3, 32, 32])
            doc = export_model.export(copy.deepcopy(file_models.make(name)), kind, shape, name, name)
            path = at(name + ".json")
            with open(path, "w") as f:
                f.write(export_model.to_json(doc))
            for flags in [["--precision", "bf16"], ["--sync", "zero3"]]:
                rc, out, err = run(["plan", "--model", path, "--devices", "meta:2", "--batch", "4",
                                    "--roofline", "H200"] + flags)
                check(f"every op counted: model file {name} {' '.join(flags)}",
                      rc == 0 and "step lower bound" in out and "not counted" not in out, out[-800:] + err)

CLI.finish()
