"""The dp CLI on bad input: a clear message on stderr naming the problem, exit 2 for usage
errors, 1 for runtime errors, 3 for out of memory; never a crash or a hang; an existing --save
file untouched when the run fails. Also the happy paths: train, metrics, save, devices.

usage: test_cli.py DP_BINARY
"""
import json
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli, write_idx  # noqa: E402
from checks import losses as step_losses  # noqa: E402

CLI = Cli(timeout=120)
check, run, expect = CLI.check, CLI.run, CLI.expect


def cifar_dir(base, name, train_records=20, test_records=8, label=None, extra=0, test=True):
    d = os.path.join(base, name)
    os.makedirs(d)

    def records(n):
        return b"".join(bytes([label if label is not None else i % 10]) + bytes((i * 5 + j) % 256 for j in range(3072))
                        for i in range(n))
    open(os.path.join(d, "data_batch_1.bin"), "wb").write(records(train_records) + b"x" * extra)
    if test:
        open(os.path.join(d, "test_batch.bin"), "wb").write(records(test_records))
    return d


def mnist_dir(base, name, **kw):
    d = os.path.join(base, name)
    os.makedirs(d)
    labels = [i % 10 for i in range(40)]
    images = bytes((i * 7) % 256 for i in range(40 * 784))
    write_idx(d, "train", kw.get("images", images), kw.get("labels", labels), kw.get("count"), kw.get("magic", 0x803))
    write_idx(d, "t10k", images[:10 * 784], labels[:10])
    return d


with tempfile.TemporaryDirectory() as tmp:
    good = mnist_dir(tmp, "good")
    small = ["train", "--data", good, "--devices", "host:2", "--steps", "2", "--batch", "8", "--model", "mlp"]

    # Happy path: metrics, save, eval.
    save = os.path.join(tmp, "w.safetensors")
    metrics = os.path.join(tmp, "m.jsonl")
    rc, out, err = run(small + ["--save", save, "--metrics", metrics, "--eval", "--steps", "5"])
    check("train runs", rc == 0, err)
    rows = [json.loads(l) for l in open(metrics)]
    steps = [r for r in rows if "step" in r]
    check("metrics per step", [r["step"] for r in steps] == [1, 2, 3, 4, 5], rows)
    check("metrics fields", all({"epoch", "loss", "samples_per_s", "chunks", "time_s"} <= set(r) for r in steps))
    # time_s is the wall clock since the loop began: it holds every step's own time, and more.
    step_sums = [sum(sum(r["chunks"]) / r["samples_per_s"] for r in steps[:k + 1]) for k in range(len(steps))]
    check("metrics time_s covers the steps", all(r["time_s"] >= s * (1 - 1e-9) for r, s in zip(steps, step_sums)),
          [(r["time_s"], s) for r, s in zip(steps, step_sums)])
    check("metrics chunks", steps[0]["chunks"] == [4, 4] and steps[-1]["chunks"] == [4, 4], steps[0])
    check("eval row", any("test_accuracy" in r and "test_loss" in r for r in rows), rows)
    check("saved", os.path.getsize(save) > 0)
    saved_bytes = open(save, "rb").read()
    saved_metrics = open(metrics, "rb").read()  # every failing run below must leave these bytes alone

    rc, out, err = run(["devices"])
    check("devices", rc == 0 and "host" in out and ("CUDA" in out), out + err)
    rc, out, err = run(["train", "--help"])
    check("help", rc == 0 and "--split" in out)

    check("train --help says a model file goes to --model, and how one is made",
          "NAME.json" in out and "tools/export_model.py" in out, out)
    rc, out, err = run(["help"])
    check("dp help: the commands, exit 0", rc == 0 and "train" in out and "plan" in out and "Usage: dp" in out, out + err)
    rc, out, err = run(["help", "plan"])
    check("dp help plan: plan's help", rc == 0 and "--max-batch" in out, out + err)
    expect("dp help of no command", ["help", "trian"], 2, "unknown command 'trian' (did you mean 'train'?)")
    rc, out, err = run(["devices"])
    if "CUDA: no GPU" in out:
        check("devices without a GPU: says so in plain words and what dp uses instead",
              "dp runs on host devices instead" in out and ("no NVIDIA driver" in out or "sees no GPU" in out
                                                             or "no CUDA backend" in out), out)

    # Usage errors: exit 2.
    rc, out, err = run([])
    check("dp alone: the help, and exit 2 (nothing ran)", rc == 2 and "Usage: dp" in out and "train" in out, out + err)
    expect("a flag without its value, in dp's words", ["train", "--steps"], 2,
           "error: --steps needs a value (a whole number); see dp train --help")
    expect("a number flag without its value", ["train", "--lr"], 2, "--lr needs a value (a number)")
    # Mistyped commands and flags are named, with the closest known one.
    expect("unknown command", ["trian"], 2, "unknown command 'trian' (did you mean 'train'?)")
    expect("unknown command far from any", ["xyzzyplugh"], 2, "unknown command 'xyzzyplugh'; the commands: train")
    expect("mistyped flag", ["train", "--epoch", "2"], 2,
           "unknown option '--epoch' for dp train (did you mean '--epochs'?)")
    expect("mistyped flag with a value", ["memprof", "--batchh=3"], 2,
           "unknown option '--batchh' for dp memprof (did you mean '--batch'?)")
    expect("a value without its flag", ["plan", "--model", "mlp", "stray"], 2, "unexpected argument 'stray' for dp plan")
    expect("--prompt needs --sample", ["train", "--model", "gpt", "--prompt", "hi"], 2, "--prompt requires --sample")
    rc, out, err = run(["--version"])
    check("--version names the commit and the build", rc == 0 and out.startswith("dp-engine, commit ")
          and ", built with" in out, out + err)
    for name, extra, needle in [
        ("unknown flag", ["--bogus"], "bogus"),
        ("unknown model", ["--model", "resnet999"], "unknown model 'resnet999'"),
        ("bad weight decay params", ["--weight-decay-params", "biases"], "--weight-decay-params 'biases'"),
        ("label smoothing above 1", ["--label-smoothing", "1.5"], "--label-smoothing must be in [0, 1]"),
        ("batch 0", ["--batch", "0"], "--batch must be > 0"),
        ("batch negative", ["--batch", "-4"], "--batch must be > 0"),
        ("steps 0", ["--steps", "0"], "--steps must be > 0"),
        ("steps negative", ["--steps", "-1"], "--steps must be > 0"),
        ("epochs 0", ["--epochs", "0"], "--epochs must be > 0"),
        ("lr nan", ["--lr", "nan"], "--lr must be a finite number"),
        ("lr inf", ["--lr", "inf"], "--lr must be a finite number"),
        ("lr negative", ["--lr", "-0.1"], "--lr must be a finite number"),
        ("nesterov without momentum", ["--nesterov", "--momentum", "0"], "--nesterov requires"),
        ("nesterov with dampening", ["--nesterov", "--dampening", "0.5"], "--nesterov requires"),
        ("dampening negative", ["--dampening", "-1"], "--dampening must be a finite number"),
        ("optimizer unknown", ["--optimizer", "adam"], "sgd or adamw"),
        ("betas one value", ["--optimizer", "adamw", "--betas", "0.9"], "--betas takes two numbers"),
        ("betas out of range", ["--optimizer", "adamw", "--betas", "1,0.9"], "--betas"),
        ("eps zero", ["--optimizer", "adamw", "--eps", "0"], "--eps"),
        ("schedule unknown", ["--lr-schedule", "cosin"], "--lr-schedule"),
        ("schedule step N", ["--lr-schedule", "step:0,0.5"], "N must be > 0"),
        ("schedule step G", ["--lr-schedule", "step:10"], "step:N,G"),
        ("warmup negative", ["--warmup-steps", "-1"], "--warmup-steps"),
        ("min-lr above lr", ["--lr-schedule", "cosine", "--min-lr", "1"], "--min-lr"),
        ("clip negative", ["--clip-grad-norm", "-1"], "--clip-grad-norm"),
        ("devices garbage", ["--devices", "gpu:3"], "--devices 'gpu:3'"),
        ("devices zero", ["--devices", "host:0"], "device count must be 1..64"),
        ("devices negative", ["--devices", "host:-2"], "device count must be 1..64"),
        ("split unknown", ["--split", "fastest"], "unknown mode"),
        ("split negative", ["--split", "chunks:10,-2"], "positive"),
        ("split wrong count", ["--split", "ratios:1,2,3"], "one per device"),
        ("split wrong sum", ["--split", "chunks:3,3"], "not the batch size 8"),
        ("split share too big", ["--split", "gpu0:9"], "larger than the batch size 8"),
    ]:
        expect(name, small + extra, 2, needle)
    expect("metrics unwritable", small + ["--metrics", os.path.join(tmp, "nodir", "m.jsonl")], 2, "--metrics")
    expect("save unwritable", small + ["--save", os.path.join(tmp, "nodir", "w.safetensors")], 2, "--save")
    expect("save is a directory", small + ["--save", tmp], 2, "is a directory")
    expect("bad split keeps --metrics", small + ["--metrics", metrics, "--split", "fastest"], 2, "unknown mode")
    check("bad split: --metrics untouched", open(metrics, "rb").read() == saved_metrics)
    expect("threads 0", small + ["--threads-per-device", "0"], 2, "--threads-per-device")
    expect("speed zero", small + ["--device-speed", "1,0"], 2, "--device-speed")
    expect("speed above 1", small + ["--device-speed", "1,2"], 2, "[0.001, 1]")
    expect("speed too small", small + ["--device-speed", "1,1e-9"], 2, "[0.001, 1]")
    expect("speed underflow", small + ["--device-speed", "1,1e-18"], 2, "[0.001, 1]")
    expect("speed count", small + ["--device-speed", "1,1,1"], 2, "3 speeds given for 2 devices")
    expect("speed not a number", small + ["--device-speed", "fast"], 2, "device-speed")
    expect("speed on cuda", small + ["--devices", "cuda:0x2", "--device-speed", "1,0.5"], 2, "host devices")
    rc, out, err = run(small + ["--split", "auto", "--device-speed", "1,0.5", "--steps", "4"])
    check("split auto runs", rc == 0, err)
    expect("bad host sync", small + ["--host-sync", "never"], 2, "--host-sync 'never'")
    expect("bad cudnn choice", small + ["--cudnn", "fastest"], 2, "--cudnn 'fastest': expected deterministic, heuristic or benchmark")
    rc, out, err = run(small, env={"DP_LINEAR_GEMM": "fast"})
    check("bad DP_LINEAR_GEMM", rc == 2 and "DP_LINEAR_GEMM 'fast': expected cublas, lt or lt-splitk" in err, err)
    # host devices have no cuBLAS: the knob changes nothing there, bit for bit
    plain = run(small + ["--metrics", os.path.join(tmp, "gemm_plain.jsonl")])
    lt = run(small + ["--metrics", os.path.join(tmp, "gemm_lt.jsonl")], env={"DP_LINEAR_GEMM": "lt"})
    check("DP_LINEAR_GEMM lt on host devices: runs, the same losses as without it",
          plain[0] == 0 and lt[0] == 0 and step_losses(os.path.join(tmp, "gemm_lt.jsonl")) ==
          step_losses(os.path.join(tmp, "gemm_plain.jsonl")) != [], (plain[2], lt[2]))
    # --op-times: every op of the steps after the first timed per phase and op, device 0's table on
    # stdout, every device's rows in the file; the training unchanged, bit for bit
    ops_path, ops_save, plain_save = (os.path.join(tmp, n) for n in ("ops.json", "ops.safetensors", "plain.safetensors"))
    ops_small = small + ["--steps", "4"]
    plain = run(ops_small + ["--save", plain_save, "--metrics", os.path.join(tmp, "ops_plain.jsonl")])
    rc, out, err = run(ops_small + ["--save", ops_save, "--metrics", os.path.join(tmp, "ops_timed.jsonl"),
                                    "--op-times", ops_path, "--roofline", "H100"])
    check("--op-times runs, its table on stdout", rc == 0 and plain[0] == 0 and "op times on host:0 (the host's clock), "
          "steps 2 to 4: a step took " in out and "at roofline on H100" in out and "forward    linear_forward (fp32)" in out,
          out + err)
    check("--op-times: the same training, bit for bit", open(ops_save, "rb").read() == open(plain_save, "rb").read()
          and step_losses(os.path.join(tmp, "ops_timed.jsonl")) == step_losses(os.path.join(tmp, "ops_plain.jsonl")))
    ops = json.load(open(ops_path))
    dev0 = ops["devices"][0]
    forward_linear = [r for r in dev0["ops"] if (r["phase"], r["op"]) == ("forward", "linear_forward")]
    check("--op-times: steps 2 to 4, both devices, each op's calls, time and roofline a step",
          ops["steps"] == {"first": 2, "last": 4, "count": 3} and [d["device"] for d in ops["devices"]] == ["host:0", "host:1"]
          and ops["roofline"] == "H100" and all(d["timing"] == "host clock" for d in ops["devices"])
          and len(forward_linear) == 1 and forward_linear[0]["calls"] == 3 and forward_linear[0]["seconds"] > 0
          and 0 < forward_linear[0]["roofline_seconds"] < forward_linear[0]["seconds"] and forward_linear[0]["flops"] > 0
          and 0 < dev0["seconds"] <= ops["step_seconds"] * 1.01
          and abs(dev0["seconds"] - sum(r["seconds"] for r in dev0["ops"])) < 1e-9, ops)
    expect("--roofline on train without --op-times", small + ["--roofline", "H100"], 2,
           "--roofline puts each op's time at best beside its measured time: add --op-times FILE")
    expect("--op-times with --cuda-graphs on", small + ["--op-times", ops_path, "--cuda-graphs", "on"], 2,
           "a step replayed from a CUDA graph (--cuda-graphs on) has none to time")
    expect("--op-times --roofline of an unknown GPU", small + ["--op-times", ops_path, "--roofline", "Z100"], 2, "Z100")
    rc, out, err = run(small + ["--steps", "1", "--op-times", ops_path])
    check("--op-times over one step times that step", rc == 0 and "steps 1 to 1" in out
          and json.load(open(ops_path))["steps"]["count"] == 1, out + err)

    # Waiting once per step (the default) or after every phase: the same training, bit for bit.
    runs = {}
    for sync in ("phase", "step"):
        path = os.path.join(tmp, f"sync_{sync}.jsonl")
        rc, out, err = run(small + ["--devices", "host:3", "--split", "chunks:3,1,4", "--steps", "5", "--host-sync",
                                    sync, "--clip-grad-norm", "0.5", "--metrics", path])
        check(f"--host-sync {sync} runs", rc == 0 and "time per step by phase" in out, err + out)
        runs[sync] = [json.loads(line) for line in open(path)] if rc == 0 else []
    check("--host-sync step = phase: losses, norms", [(r["loss"], r["grad_norm"]) for r in runs["step"]] ==
          [(r["loss"], r["grad_norm"]) for r in runs["phase"]], runs)
    check("--host-sync step: phase times from events", all(
        len(r["phase_ms"]) == 9 and all(v >= 0 for v in r["phase_ms"].values()) and r["phase_ms"]["forward"] > 0
        for r in runs["step"]), runs["step"])
    check("metrics: each device's forward + backward time (replica_ms)", all(
        len(r["replica_ms"]) == 3 and all(v > 0 for v in r["replica_ms"]) for sync in runs for r in runs[sync]), runs)
    # Uploading the next batch while a step runs: the same training, across an epoch's end with
    # its evaluation, under either sync mode.
    expect("bad upload ahead", small + ["--upload-ahead", "sometimes"], 2, "--upload-ahead 'sometimes'")
    for sync in ("reduce", "allreduce"):
        outs = {}
        for ahead in ("off", "on"):
            path = os.path.join(tmp, f"ahead_{sync}_{ahead}.jsonl")
            rc, out, err = run(["train", "--data", good, "--devices", "host:2", "--batch", "16", "--model", "mlp",
                                "--epochs", "2", "--eval", "--sync", sync, "--upload-ahead", ahead, "--metrics", path])
            check(f"--upload-ahead {ahead} --sync {sync} runs", rc == 0, err + out)
            outs[ahead] = [json.loads(line) for line in open(path)] if rc == 0 else []
        check(f"--upload-ahead on = off ({sync}): losses and test accuracy",
              [(r.get("loss"), r.get("test_accuracy")) for r in outs["on"]] ==
              [(r.get("loss"), r.get("test_accuracy")) for r in outs["off"]] and len(outs["on"]) > 2, outs)

    # Batches made by several threads: the same training.
    expect("bad loader threads", small + ["--loader-threads", "0"], 2, "--loader-threads '0': expected auto or a number")
    expect("bad loader threads (text)", small + ["--loader-threads", "many"], 2, "--loader-threads 'many'")
    outs = {}
    for threads in ("1", "3"):
        path = os.path.join(tmp, f"loader_{threads}.jsonl")
        rc, out, err = run(["train", "--data", good, "--devices", "host:2", "--batch", "16", "--model", "mlp",
                            "--epochs", "2", "--loader-threads", threads, "--metrics", path])
        check(f"--loader-threads {threads} runs", rc == 0, err + out)
        outs[threads] = [json.loads(line) for line in open(path)] if rc == 0 else []
    check("--loader-threads 3 = 1: losses", [r.get("loss") for r in outs["3"]] == [r.get("loss") for r in outs["1"]]
          and len(outs["1"]) > 2, outs)

    # Pixels normalised on the device that loads them (--normalise-on device): the same training,
    # bit for bit, under each sync mode, captured, with --augment on CIFAR-like data, across an
    # epoch's end and its evaluation.
    expect("bad normalise-on", small + ["--normalise-on", "gpu"], 2, "--normalise-on 'gpu': expected auto, host or device")
    expect("normalise-on device for tokens", ["train", "--model", "gpt", "--gpt-layers", "1", "--gpt-dim", "32",
                                              "--context", "16", "--batch", "4", "--steps", "1", "--normalise-on",
                                              "device"], 2, "token ids have no pixels")
    for name, extra in (("reduce", []), ("allreduce", ["--sync", "allreduce"]), ("captured", ["--cuda-graphs", "on"]),
                        ("resnet8 --augment", ["--model", "resnet8", "--augment", "--generated-size", "64",
                                               "--steps", "6"])):
        outs, weights = {}, {}
        for where in ("host", "device"):
            path, saved = os.path.join(tmp, f"norm_{where}.jsonl"), os.path.join(tmp, f"norm_{where}.safetensors")
            args = ["train", "--data", good, "--devices", "host:2", "--batch", "16", "--model", "convnet", "--epochs",
                    "2", "--eval"] if not name.startswith("resnet8") else ["train", "--devices", "host:2", "--batch", "8"]
            rc, out, err = run(args + extra + ["--normalise-on", where, "--metrics", path, "--save", saved])
            check(f"--normalise-on {where} ({name}) runs", rc == 0, err + out)
            outs[where] = [json.loads(line) for line in open(path)] if rc == 0 else []
            weights[where] = open(saved, "rb").read() if rc == 0 else b""
        check(f"--normalise-on device = host ({name}): losses, test loss and accuracy, weights",
              [(r.get("loss"), r.get("test_loss"), r.get("test_accuracy")) for r in outs["device"]] ==
              [(r.get("loss"), r.get("test_loss"), r.get("test_accuracy")) for r in outs["host"]]
              and len(outs["host"]) > 2
              and weights["device"] == weights["host"] and weights["host"], (outs, len(weights["host"])))

    # Captured steps (--cuda-graphs on): the same training, across two epochs of 6 batches of 6 and
    # a short one of 4 each, with evaluation and an upload ahead before the steps run as usual.
    expect("bad cuda graphs", small + ["--cuda-graphs", "maybe"], 2, "--cuda-graphs 'maybe': expected on or off")
    outs, said = {}, {}
    for graphs in ("off", "on"):
        path = os.path.join(tmp, f"graphs_{graphs}.jsonl")
        rc, out, err = run(["train", "--data", good, "--devices", "host:2", "--batch", "6", "--model", "mlp", "--epochs",
                            "2", "--eval", "--upload-ahead", "on", "--cuda-graphs", graphs, "--metrics", path])
        check(f"--cuda-graphs {graphs} runs", rc == 0, err + out)
        outs[graphs] = [json.loads(line) for line in open(path)] if rc == 0 else []
        said[graphs] = out
    check("--cuda-graphs on = off: losses and test accuracy",
          [(r.get("loss"), r.get("test_accuracy")) for r in outs["on"]] ==
          [(r.get("loss"), r.get("test_accuracy")) for r in outs["off"]] and len(outs["on"]) > 10, outs)
    uses = [r["graph"] for r in outs["on"] if "graph" in r]
    check("--cuda-graphs on: captured once, short batches as usual, the rest replayed",
          uses == ["eager", "captured"] + ["replayed"] * 4 + ["eager"] + ["replayed"] * 6 + ["eager"], uses)
    check("--cuda-graphs off: no graph field", all("graph" not in r for r in outs["off"]), outs["off"])
    # Each replay's batch was staged during the step before: a replay's, or the short batch's run as
    # usual (into the replay's staging memory). Not the capture's (it stages its own), nor a short
    # batch's (not of the captured size, so a replay does not stage it).
    ahead = [r["loaded_ahead"] for r in outs["on"] if "graph" in r]
    check("--cuda-graphs on --upload-ahead on: replays take the batch staged during the step before",
          ahead == [False, False] + [True] * 4 + [False] + [True] * 6 + [False], ahead)
    ahead = [r["loaded_ahead"] for r in outs["off"] if "loss" in r]
    check("--upload-ahead on: every step but the first found its batch uploaded",
          ahead == [False] + [True] * 13, ahead)

    # --eval-every: evaluation after every N steps besides each epoch's end (5 steps of 8 an epoch
    # here); rows keyed after_step, the training itself untouched.
    expect("negative eval-every", small + ["--eval-every", "-1"], 2, "--eval-every must be >= 0")
    runs = {}
    for name, extra in (("plain", []), ("every", ["--eval", "--eval-every", "2"]), ("four", ["--eval", "--steps", "4"])):
        path = os.path.join(tmp, f"eval_{name}.jsonl")
        rc, out, err = run(["train", "--data", good, "--devices", "host:2", "--batch", "8", "--model", "mlp",
                            "--epochs", "2", "--metrics", path] + extra)
        check(f"--eval-every: {name} runs", rc == 0, err + out)
        runs[name] = ([json.loads(line) for line in open(path)] if rc == 0 else [], out)
    evals = [r for r in runs["every"][0] if "test_loss" in r]
    check("--eval-every 2: after steps 2 and 4, epoch 1's end (5), 6, 8 and epoch 2's end (10), once each",
          [(r["after_step"], r["epoch"]) for r in evals] == [(2, 1), (4, 1), (5, 1), (6, 2), (8, 2), (10, 2)]
          and all("step" not in r for r in evals), evals)
    check("--eval-every: printed with its step", "step 2 (epoch 1): training loss" in runs["every"][1]
          and "(the last 2 steps), test loss" in runs["every"][1] and "epoch 1: training loss" in runs["every"][1]
          and "(the last step), test loss" in runs["every"][1] and "step 10" not in runs["every"][1], runs["every"][1])
    # Each evaluation reports the mean training loss of the steps since the one before.
    step_loss = {r["step"]: r["loss"] for r in runs["every"][0] if "step" in r}
    bounds = [0] + [r["after_step"] for r in evals]
    want = [sum(step_loss[s] for s in range(a + 1, b + 1)) / (b - a) for a, b in zip(bounds, bounds[1:])]
    check("--eval-every: the training loss since the last evaluation",
          [r["train_steps"] for r in evals] == [b - a for a, b in zip(bounds, bounds[1:])]
          and all(abs(r["train_loss"] - w) <= 1e-12 * max(1, abs(w)) for r, w in zip(evals, want)), (evals, want))
    check("--eval-every changes no training step",
          [r for r in runs["every"][0] if "step" in r] and
          [(r["step"], r["loss"]) for r in runs["every"][0] if "step" in r] ==
          [(r["step"], r["loss"]) for r in runs["plain"][0] if "step" in r])
    four = [r for r in runs["four"][0] if "test_loss" in r]
    check("--eval-every: step 4's evaluation is the one a run of 4 steps ends with",
          len(four) == 1 and four[0]["after_step"] == 4 and four[0]["test_loss"] == evals[1]["test_loss"]
          and four[0]["test_accuracy"] == evals[1]["test_accuracy"], (four, evals[1:2]))
    check("--cuda-graphs on: says how many steps replayed", "10 of 14 steps replayed a captured step" in said["on"],
          said["on"])
    check("--cuda-graphs on: says why the last step ran as usual (a short batch)",
          "the last ran as usual: not the captured step's shape" in said["on"], said["on"])
    rc, out, err = run(["train", "--data", good, "--devices", "host:2", "--batch", "6", "--model", "mlp", "--steps", "4",
                        "--split", "auto", "--cuda-graphs", "on"])
    check("--cuda-graphs on with --split auto: runs as usual and says why",
          rc == 0 and "0 of 4 steps replayed a captured step; the last ran as usual: --split auto measures" in out,
          err + out)

    # --trace: a Chrome/Perfetto timeline of a window of steps (default: the run's 2nd to 4th).
    def traced_steps(path):
        events = json.load(open(path))["traceEvents"]
        host = [e["tid"] for e in events if e["ph"] == "M" and e["args"].get("name") == "host: step phases"]
        return sum(1 for e in events if e["ph"] == "X" and host and e["tid"] == host[0] and e["name"] == "load")
    trace = os.path.join(tmp, "train-trace.json")
    rc, out, err = run(small + ["--steps", "6", "--trace", trace, "--trace-steps", "2:4"])
    check("--trace-steps 2:4: three steps traced", rc == 0 and traced_steps(trace) == 3
          and f"trace of steps 2-4: {trace}" in out, err + out)
    rc, out, err = run(small + ["--steps", "3", "--trace", trace])
    check("--trace: by default from the 2nd step, written when the run ends inside the window",
          rc == 0 and traced_steps(trace) == 2 and "trace of steps 2-3" in out, err + out)
    for bad in ("4:2", "0:3", "2-4", "x:3"):
        expect(f"--trace-steps {bad}", small + ["--trace", trace, "--trace-steps", bad], 2, f"--trace-steps '{bad}'")
    expect("--trace-steps without --trace", small + ["--trace-steps", "2:3"], 2, "add --trace")

    # --save-best: after each evaluation whose loss is the lowest so far, the weights then; a run
    # that stops at that step saves the same bytes. A resumed run goes on from its checkpoint's best.
    expect("save-best the same file as save", small + ["--eval", "--save", os.path.join(tmp, "same.safetensors"),
                                                       "--save-best", os.path.join(tmp, "same.safetensors")], 2,
           "--save and --save-best name the same file")
    expect("save-best without evaluations", small + ["--save-best", os.path.join(tmp, "nb.safetensors")], 2,
           "--save-best keeps the weights of the best evaluation")
    best_run = ["train", "--data", good, "--devices", "host:2", "--batch", "8", "--model", "mlp", "--epochs", "4",
                "--lr", "0.3", "--lr-schedule", "step:12,30", "--eval-every", "2"]  # the best at step 12, then worse
    best, best_m, ck = (os.path.join(tmp, n) for n in ("best.safetensors", "best.jsonl", "best_ck"))
    rc, out, err = run(best_run + ["--save-best", best, "--metrics", best_m, "--checkpoint", ck, "--checkpoint-every",
                                   "5", "--keep-checkpoints", "10"])
    check("--save-best runs", rc == 0, err + out)
    evals = [json.loads(line) for line in open(best_m) if "test_loss" in line] if rc == 0 else []
    losses = [r["test_loss"] for r in evals]
    check("--save-best: saved where the loss is the lowest so far",
          evals and [r["saved_best"] for r in evals] == [all(x < y for y in losses[:i]) for i, x in enumerate(losses)],
          evals)
    at = evals[losses.index(min(losses))]["after_step"] if evals else 0
    stop = os.path.join(tmp, "stop.safetensors")
    rc, out2, err = run(best_run + ["--steps", str(at), "--save", stop])
    check(f"--save-best holds the weights after step {at}", rc == 0 and open(best, "rb").read() == open(stop, "rb").read(),
          (at, losses))
    check("--save-best: said", f"after step {at}: its weights are {best}" in out and "the best so far: saved" in out, out)
    resumed_best, resumed_m = os.path.join(tmp, "best2.safetensors"), os.path.join(tmp, "best2.jsonl")
    rc, out, err = run(best_run + ["--save-best", resumed_best, "--metrics", resumed_m, "--resume",
                                   os.path.join(ck, "step-00000015")])
    again = [json.loads(line) for line in open(resumed_m) if "test_loss" in line] if rc == 0 else []
    check("--save-best after --resume: measured against the checkpoint's best (step 12): nothing better since",
          rc == 0 and at == 12 and [r["after_step"] for r in again] == [16, 18, 20]
          and [r["saved_best"] for r in again] == [False] * 3 and not os.path.exists(resumed_best)
          and "after step 12: before the checkpoint this run resumed from" in out, (err, again, losses))

    # Runtime errors: exit 1, and the existing --save file is untouched.
    def keeps_save(name, args, code, needle):
        expect(name, args + ["--save", save, "--metrics", metrics], code, needle)
        check(name + ": --save untouched", open(save, "rb").read() == saved_bytes)
        check(name + ": --metrics untouched", open(metrics, "rb").read() == saved_metrics)

    # --devices auto says in one line when it falls back to host:2: that tells this test whether the
    # machine has a GPU. Without one, asking for CUDA is an error that loses nothing; with one, the
    # step runs there, and a GPU that does not exist is the error.
    rc, out, err = run(small + ["--devices", "auto", "--steps", "1"])
    check("--devices auto runs", rc == 0, err + out)
    if "no CUDA GPU" in err:
        check("auto without a GPU: host:2", "host:2" in err + out, err + out)
        keeps_save("cuda absent", small + ["--devices", "cuda:0x4"], 1, "no CUDA GPU is available")
    else:
        check("auto with a GPU: every GPU", "cuda (auto: " in err + out, err + out)
        rc, out, err = run(small + ["--devices", "cuda:0x4", "--steps", "2"])
        check("cuda:0x4 trains on the GPU", rc == 0 and "on cuda:0x4" in err + out, err + out)
        # logical devices of one GPU: the reduce reads the replicas' gradients in place, no buffers
        rc, out, err = run(["demo", "--devices", "cuda:0x2"])
        check("demo on cuda:0x2: the reduce reads in place, and device 0 holds no reduce buffers",
              rc == 0 and "read by device 0 where they are" in out and "received into buffers" not in out
              and "reduce buffers, on top" not in out, err + out[-3000:])
        keeps_save("cuda: no such GPU", small + ["--devices", "cuda:63"], 1, "GPU 63 does not exist")
    keeps_save("data missing: a usage error", small + ["--data", os.path.join(tmp, "nope")], 2,
               "no such file or directory")
    idx_file = os.path.join(good, sorted(f for f in os.listdir(good) if f.startswith("train-images"))[0])
    keeps_save("data names an IDX file: the directory to give", small + ["--data", idx_file], 2,
               f"is an IDX file; --model mlp takes the directory that holds the data set")
    keeps_save("data names an IDX file: where it is", small + ["--data", idx_file], 2, f"(here: --data {good})")
    text_file = os.path.join(tmp, "notes.txt")
    open(text_file, "w").write("some text")
    keeps_save("data names a text file: for the GPT", small + ["--data", text_file], 2,
               "a text or token file is for --model gpt")
    keeps_save("bad magic", ["train", "--data", mnist_dir(tmp, "magic", magic=0x1234)] + small[3:], 1, "bad magic")
    keeps_save("truncated", ["train", "--data", mnist_dir(tmp, "trunc", images=bytes(100))] + small[3:], 1,
               "truncated")
    keeps_save("huge count", ["train", "--data", mnist_dir(tmp, "huge", count=1 << 30)] + small[3:], 1,
               "more than any file holds")
    keeps_save("count mismatch", ["train", "--data", mnist_dir(tmp, "mismatch", count=39,
                                                             images=bytes((i * 7) % 256 for i in range(39 * 784)))]
               + small[3:], 1, "40 labels for 39 images")
    keeps_save("bytes after the images", ["train", "--data", mnist_dir(tmp, "trailing", count=39)] + small[3:], 1,
               "bytes after the 39 images its header announces")
    keeps_save("label > 9", ["train", "--data", mnist_dir(tmp, "label", labels=[12] + [1] * 39)] + small[3:], 1,
               "label 12 of sample 0")
    bad_init = os.path.join(tmp, "bad.safetensors")
    for name, blob, needle in [
        ("init empty", b"", "too short"),
        ("init huge header", struct.pack("<Q", 1 << 60) + b"{}", "exceeds the file"),
        ("init garbage header", struct.pack("<Q", 5) + b"garbage", "not JSON"),
    ]:
        open(bad_init, "wb").write(blob)
        keeps_save(name, small + ["--init", bad_init], 1, needle)
    # Weights that do not fit the model are found before anything runs: a usage error, as for a model file.
    open(bad_init, "wb").write(struct.pack("<Q", 2) + b"{}")
    keeps_save("init without the model's tensors", small + ["--init", bad_init], 2, "missing tensor '1.weight'")
    # --init must be another file than --save (an output may not overwrite an input).
    mlp_init = os.path.join(tmp, "mlp-init.safetensors")
    open(mlp_init, "wb").write(saved_bytes)
    keeps_save("init wrong model", small[:-2] + ["--model", "convnet", "--init", mlp_init], 2, "unexpected tensor")
    keeps_save("init missing", small + ["--init", os.path.join(tmp, "none.safetensors")], 1, "cannot open")

    # ResNets and CIFAR-10: the directory's content decides the format.
    cifar = cifar_dir(tmp, "cifar")
    res_flags = ["--model", "resnet8", "--devices", "host:2", "--batch", "8", "--steps", "2"]
    res = ["train", "--data", cifar] + res_flags
    res_save = os.path.join(tmp, "r8.safetensors")
    rc, out, err = run(res + ["--augment", "--eval", "--save", res_save])
    check("resnet8 on CIFAR-10 files", rc == 0 and "CIFAR-10 from" in err and "test accuracy" in out, err + out)
    keeps_save("resnet18 on MNIST", ["train", "--model", "resnet18", "--data", good, "--steps", "1"], 2,
               "takes [3, 32, 32] samples")
    keeps_save("convnet on CIFAR", ["train", "--model", "convnet", "--data", cifar, "--steps", "1"], 2,
               "takes [1, 28, 28] samples")
    keeps_save("CIFAR record size", ["train", "--data", cifar_dir(tmp, "cifar_size", extra=7)] + res_flags, 1,
               "is not a whole number of CIFAR-10 records")
    keeps_save("CIFAR label > 9", ["train", "--data", cifar_dir(tmp, "cifar_label", label=11)] + res_flags, 1,
               "has label 11")
    keeps_save("CIFAR test file missing", ["train", "--data", cifar_dir(tmp, "cifar_notest", test=False)] + res_flags,
               1, "missing test_batch.bin")
    keeps_save("init from another model", res + ["--init", mlp_init], 2, "unexpected tensor '1.bias'")
    keeps_save("resnet8 init into resnet18", ["train", "--model", "resnet18", "--data", cifar, "--steps", "1",
                                              "--batch", "8", "--init", res_save], 2,
               "tensor 'conv1.weight' has shape [16, 3, 3, 3], the model needs [64, 3, 3, 3]")

# --steps alone means steps (over as many epochs as they take); with --epochs, whichever comes first.
tiny = ["train", "--model", "mlp", "--devices", "host:2", "--generated-size", "640", "--batch", "64"]
rc, out, err = run(tiny + ["--steps", "25"])
check("--steps 25 alone trains 25 steps over 3 epochs of 10", rc == 0 and "trained 25 steps" in out, out + err)
rc, out, err = run(tiny + ["--steps", "25", "--epochs", "1"])
check("--steps 25 --epochs 1 stops at the epoch's 10", rc == 0 and "trained 10 steps" in out, out + err)
rc, out, err = run(tiny + ["--epochs", "2"])
check("--epochs 2 alone trains 20 steps", rc == 0 and "trained 20 steps" in out, out + err)

# --help groups the options under headings.
rc, out, err = run(["train", "--help"])
for heading in ("Model:", "Data:", "Devices and split:", "Optimization:", "Precision and memory:",
                "Distributed (DDP, ZeRO, mpirun):", "Checkpoints and outputs:", "CUDA only:"):
    check(f"train --help: the heading {heading}", rc == 0 and f"\n{heading}\n" in out, out[:400])
rc, out, err = run(["plan", "--help"])
check("plan --help: its own options under 'dp plan'", rc == 0 and "\ndp plan:\n" in out and "--compare" in out, out[:400])

# The CUDA notice only where CUDA was asked for (or auto fell back): never on host devices' errors.
for args in (["train", "--devices", "host:2", "--batch", "0"], ["memprof", "--devices", "host:2", "--device-memory", "x"],
             ["demo", "--devices", "host:2", "--model", "nope"]):
    rc, out, err = run(args)
    check(f"no CUDA notice on a host run's error: {' '.join(args)}", rc == 2 and "CUDA" not in err, err)

CLI.finish()
