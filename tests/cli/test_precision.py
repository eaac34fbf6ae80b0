"""--precision bf16 / fp16 end to end:
- bad flags are usage errors naming the flag (train, memprof, demo);
- fp16 training reports its loss scale and skipped steps per step and in the summary; a loss scale
  too large to be a float16 gradient skips steps and halves until it fits;
- checkpoints keep the loss scale (GradScaler's scale and growth tracker): an fp16 run resumed
  from a checkpoint ends bitwise equal to the uninterrupted run, bf16 too;
- memprof names the precision and shows 16-bit replicas: device 1's parameters and gradients take
  half of float32's bytes;
- --sync allreduce (DDP under autocast): on 2 devices bitwise the faithful step with the loss in each
  replica, fp16's skipped steps included; its resume; memprof without a device-0 hotspot; the demo.

usage: test_precision.py DP_BINARY
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli, write_mnist_like  # noqa: E402

CLI = Cli()
check, run, expect = CLI.check, CLI.run, CLI.expect


def rows(path):
    return [json.loads(line) for line in open(path) if '"step"' in line]


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    write_mnist_like(data, "train", 50)  # batch 8: 7 steps an epoch
    write_mnist_like(data, "t10k", 10)
    base = ["train", "--data", data, "--devices", "host:2", "--batch", "8", "--model", "mlp"]

    # ---- bad flags
    for cmd in (["train", "--steps", "1"], ["memprof"], ["demo"]):
        expect(f"{cmd[0]}: unknown precision", cmd + ["--precision", "fp8"], 2, "--precision 'fp8'")
    expect("loss scale without fp16", base + ["--steps", "1", "--precision", "bf16", "--loss-scale", "1024"],
           2, "--loss-scale")
    expect("loss scale of zero", base + ["--steps", "1", "--precision", "fp16", "--loss-scale", "0"], 2,
           "--loss-scale must be a positive")
    expect("loss scale beyond float32", base + ["--steps", "1", "--precision", "fp16", "--loss-scale", "1e39"],
           2, "--loss-scale must be a positive, finite")
    expect("growth interval of zero",
           base + ["--steps", "1", "--precision", "fp16", "--loss-scale-growth-interval", "0"], 2,
           "--loss-scale-growth-interval")

    # ---- fp16: the scale per step; an overflowing scale backs off until the gradients fit
    m = os.path.join(tmp, "fp16.jsonl")
    # 2^30 / batch is far beyond float16's 65504: the loss gradient itself overflows.
    rc, out, err = run(base + ["--epochs", "4", "--steps", "24", "--precision", "fp16", "--loss-scale", str(2 ** 30),
                               "--metrics", m])
    check("fp16 run", rc == 0, err)
    r = rows(m)
    scales = [row["loss_scale"] for row in r]
    skipped = [row["skipped"] for row in r]
    check("fp16: an overflowing scale skips the first steps", skipped[0] and not skipped[-1], skipped)
    check("fp16: each skipped step halves the scale",
          all(b == a / 2 for a, b, s in zip(scales, scales[1:], skipped) if s), scales)
    check("fp16: clean steps keep it", all(b == a for a, b, s in zip(scales, scales[1:], skipped) if not s), scales)
    n_skipped = sum(skipped)
    check("fp16: the summary counts skipped steps",
          f"fp16 loss scaling: {n_skipped} of 24 steps skipped" in out, out)
    check("fp16: the banner names the precision", ", fp16," in err, err)
    m32 = os.path.join(tmp, "fp32.jsonl")
    run(base + ["--steps", "2", "--metrics", m32])
    check("fp32 metrics carry no loss scale", "loss_scale" not in rows(m32)[0], rows(m32)[0])

    # ---- --sync allreduce (DDP under autocast) on 2 devices: bitwise the faithful step with the loss in
    # each replica — the same 16-bit copies, and the sum of two widened gradients has no order to differ in
    for p in ("fp16", "bf16"):
        flags = ["--epochs", "2", "--precision", p, "--lr", "0.05"] + (["--loss-scale", str(2 ** 22)] if p == "fp16" else [])
        runs = {}
        for sync in ("reduce", "allreduce"):
            m, st = os.path.join(tmp, f"{p}-{sync}.jsonl"), os.path.join(tmp, f"{p}-{sync}.st")
            rc, _, err = run(base + flags + ["--sync", sync, "--loss", "in-replica", "--metrics", m, "--save", st])
            check(f"{p} --sync {sync}", rc == 0, err)
            runs[sync] = ([(x["loss"], x.get("loss_scale"), x.get("skipped")) for x in rows(m)], open(st, "rb").read())
        check(f"{p}: allreduce = reduce, step by step (loss, scale, skipped)", runs["allreduce"][0] == runs["reduce"][0],
              runs)
        check(f"{p}: allreduce = reduce, bitwise the same weights", runs["allreduce"][1] == runs["reduce"][1])
        if p == "fp16":
            check("fp16 allreduce: the overflowing scale skipped steps", runs["allreduce"][0][0][2], runs["allreduce"][0])

    # ---- exact resume, the loss scale included (growth every 2 clean steps, so it moves)
    for name, flags in [("fp16", ["--precision", "fp16", "--loss-scale", "4096", "--loss-scale-growth-interval", "2"]),
                        ("bf16", ["--precision", "bf16"]),
                        ("fp16-allreduce", ["--precision", "fp16", "--loss-scale", "4096", "--loss-scale-growth-interval",
                                            "2", "--sync", "allreduce"])]:
        ck = os.path.join(tmp, f"ck-{name}")
        whole_st, whole_m = os.path.join(tmp, f"{name}.st"), os.path.join(tmp, f"{name}.jsonl")
        args = base + ["--epochs", "2", "--lr", "0.05"] + flags
        rc, _, err = run(args + ["--checkpoint", ck, "--checkpoint-every", "3", "--keep-checkpoints", "10", "--save",
                                 whole_st, "--metrics", whole_m])
        check(f"{name}: uninterrupted run", rc == 0, err)
        state = json.load(open(os.path.join(ck, "step-00000006", "state.json")))
        check(f"{name}: state.json names the precision", state.get("precision") == name.split("-")[0], state)
        if name.startswith("fp16"):
            want_scale = rows(whole_m)[5]["loss_scale"]  # the scale after step 6 is the next step's
            after = rows(whole_m)[6]["loss_scale"]
            check("fp16: state.json keeps the loss scale", state.get("loss_scale", {}).get("scale") == after and
                  "growth_tracker" in state["loss_scale"], (state.get("loss_scale"), want_scale, after))
        st, m = os.path.join(tmp, f"{name}-6.st"), os.path.join(tmp, f"{name}-6.jsonl")
        rc, _, err = run(args + ["--resume", os.path.join(ck, "step-00000006"), "--save", st, "--metrics", m])
        check(f"{name}: resumed", rc == 0 and "at step 6" in err, err)
        check(f"{name}: resumed: bitwise the same weights", open(st, "rb").read() == open(whole_st, "rb").read())
        check(f"{name}: resumed: the same losses and scales",
              [(x["loss"], x.get("loss_scale")) for x in rows(m)] == [(x["loss"], x.get("loss_scale"))
                                                                      for x in rows(whole_m)[6:]])

    # ---- memprof: 16-bit replicas take half the bytes
    reports = {}
    for p in ("fp32", "bf16"):
        js = os.path.join(tmp, f"memprof-{p}.json")
        rc, out, err = run(["memprof", "--model", "convnet", "--devices", "host:2", "--batch", "16", "--precision", p,
                            "--json", js])
        check(f"memprof {p}", rc == 0, err)
        reports[p] = json.load(open(js))
        if p == "bf16":
            check("memprof says what each category is stored in", "precision bf16: float32 master parameters" in out,
                  out)
    check("memprof json names the precision", reports["bf16"]["precision"] == "bf16")
    d1 = {p: reports[p]["devices"][1]["peak_by_category"] for p in reports}
    check("memprof: device 1's gradients in half the bytes (give or take the allocator's 512-byte rounding)",
          abs(2 * d1["bf16"]["gradients"] - d1["fp32"]["gradients"]) <= 1024, d1)
    check("memprof: device 1's activations in about half the bytes",
          0.45 <= d1["bf16"]["activations"] / d1["fp32"]["activations"] <= 0.55, d1)
    js = os.path.join(tmp, "memprof-allreduce.json")
    rc, out, err = run(["memprof", "--model", "convnet", "--devices", "host:4", "--batch", "32", "--precision", "bf16",
                        "--sync", "allreduce", "--json", js])
    check("memprof bf16 allreduce", rc == 0, err)
    if rc == 0:
        check("memprof bf16 allreduce: device 0 within 1.05x of the others", json.load(open(js))["gpu0_excess"] <= 1.05)

    # ---- demo: DDP under autocast narrated
    js = os.path.join(tmp, "demo.json")
    rc, out, err = run(["demo", "--devices", "host:2", "--sync", "allreduce", "--precision", "fp16", "--json", js])
    check("demo fp16 allreduce", rc == 0, err)
    if rc == 0:
        phases = {ph["phase"]: ph for ph in json.load(open(js))["steps"][0]["phases"]}
        dtypes = {(t["name"], t["device"]): t["dtype"] for ph in phases.values() for t in ph["tensors"]}
        check("demo fp16 allreduce: each device's float16 copy, float32 all-reduced gradients",
              dtypes.get(("replica 1 parameters", 1)) == "float16"
              and dtypes.get(("gradients (all-reduced)", 1)) == "float32", dtypes)
        check("demo fp16 allreduce: the widening and the loss scale narrated",
              "widens the bucket's float16 gradients" in out and "multiplied by the loss scale" in out, out)

CLI.finish()
