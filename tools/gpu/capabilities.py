"""dp's newer capabilities on a GPU, in one invocation (tools/gpu/verify.py's `capabilities` stage).
Each part prints a Markdown table and one verdict line ("PASS part: ..." or "FAIL part: ...");
standard library only, but for the model file's export (done on the build machine) and PyTorch's
side of `memory`.

  plan    dp plan --devices meta:4 against dp memprof --devices cuda:0x4, same flags (mlp, convnet,
          resnet8, the GPT; DataParallel, ZeRO-3 and a ZeRO-2 GPT; the resnet50 model file): each
          device's peak (target: the plan within [1.00x, 1.05x] of the devices) and what it holds at
          the peak, category by category. Workspace is compared apart: the other categories must be
          equal, and the table says by how much the workspace differs. With --fixtures DIR each
          memprof report from the devices is written there (its flags, the GPU, the report; a model
          file beside it): tools/gpu/record_run.py makes them tests/fixtures/gpu-memprof, which a CPU
          test holds the plan to. Then dp train on cuda:0x4, same flags: waiting per phase
          (--host-sync phase) each device's peak in every phase must be memprof's; waiting per step
          (CUDA's default) its peaks are listed against memprof's.
  zero    --sync zero1, zero2, zero3 on cuda:0x4: 20 steps of a small GPT against host:4 (losses and
          weights within compare_runs.py's tolerance, calibrated by host:4 with 1 and 2 threads per
          device) and against --sync allreduce on cuda:0x4 (the same tolerance). ZeRO across
          processes (NCCL's ReduceScatter and AllGather, one rank a GPU) needs two GPUs and mpirun:
          run where both are, said otherwise.
  file    two model files exported into .gpu-kit by tools/gpu/kit.sh — torchvision's resnet50 at
          3x64x64 (chunks of 16 samples) and nanoGPT's model.py GPT, .gpu-kit/nanogpt.json (4 layers,
          width 256, context 128; chunks of 4 sequences) — on cuda:0x2 against host:2: one SGD update
          from the same weights, its loss and every weight and buffer after it, within 10x the
          float32 spread measured on host:2 (see one_update).
  memory  dp's device memory against PyTorch's on the same GPU: dp memprof --devices cuda:0's peak
          against torch.cuda.max_memory_allocated() over the same steps (tools/bench/torch_speed.py,
          one batch on the device): resnet18 at batch 128 with SGD, the GPT at its defaults with
          AdamW, fp32. Target: dp <= 1.0x.

usage: capabilities.py --dp build-gpu/dp [--only plan,zero,file,memory] [--gpu cuda:0] [--multi cuda:0x4]
                       [--pair cuda:0x2] [--model-file .gpu-kit/resnet50.json] [--torch-device cuda]
                       [--transformer-file .gpu-kit/nanogpt.json] [--fixtures DIR]
A check of the plumbing on a CPU (small sizes, host devices; PyTorch's memory is a GPU's only):
  /usr/bin/python3 tools/gpu/capabilities.py --dp build/dp --gpu host:1 --multi host:4 --pair host:2 \\
      --torch-device cpu --small --model-file net.json
Exit status: the number of parts that failed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
from openblas import coretype  # noqa: E402
import compare_runs  # noqa: E402
import weights_file  # noqa: E402
GPT_SMALL = ["--model", "gpt", "--gpt-layers", "2", "--gpt-dim", "128", "--context", "64"]


class Part:
    """One part's verdict: failures named, notes kept for its line."""

    def __init__(self, name):
        self.name, self.failures, self.notes = name, [], []

    def fail(self, what):
        self.failures.append(what)

    def verdict(self):
        word = "FAIL" if self.failures else "PASS"
        said = self.failures + self.notes
        print(f"\n{word} {self.name}: {'; '.join(said) if said else 'all equal'}\n", flush=True)
        return 1 if self.failures else 0


def run(cmd, env, timeout=900):
    """(exit code, stdout, stderr); a run past its time is exit 124."""
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout} s"


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else "(no output)"


def like(kind, devices):
    """The same number of devices of another kind: like("host", "cuda:0x4") is "host:4"."""
    given, _, which = devices.partition(":")
    if given in ("host", "meta"):
        count = which or 1  # host:N: N devices
    else:  # cuda:0x4 (four on one GPU), cuda:0,1 (these GPUs), cuda:0
        count = which.split("x")[1] if "x" in which else len(which.split(",")) if which else 1
    return f"{kind}:{count}"


def mib(b):
    return f"{b / 2**20:.2f}"


def plan_runs(a):
    """The plan part's runs: each a list of flags (its --batch included)."""
    batch = "16" if a.small else "128"
    runs = [["--model", "mlp"], ["--model", "convnet"], ["--model", "resnet8"], GPT_SMALL + ["--batch", "16"],
            ["--model", "resnet8", "--sync", "zero3"], GPT_SMALL + ["--batch", "16", "--sync", "zero2"]]
    if os.path.exists(a.model_file):
        runs.append(["--model", a.model_file, "--batch", "8" if a.small else "32"])
    return [flags if "--batch" in flags else flags + ["--batch", batch] for flags in runs]


def write_fixture(a, flags, devices, report):
    """The memprof report of a run on the devices, for tests/fixtures (tools/gpu/record_run.py copies it
    there): its flags with a model file named by its file name (the file is written beside it)."""
    os.makedirs(a.fixtures, exist_ok=True)
    named = list(flags)
    if "--model" in named and named[named.index("--model") + 1].endswith(".json"):
        path = named[named.index("--model") + 1]
        named[named.index("--model") + 1] = os.path.basename(path)
        shutil.copy(path, os.path.join(a.fixtures, os.path.basename(path)))
    slug = re.sub(r"[^A-Za-z0-9]+", "-", " ".join(named).replace(".json", "")).strip("-").lower()
    fixture = {"command": "memprof", "devices": devices, "flags": named + ["--steps", "2"], "gpu": gpu_name(),
               "report": report}
    with open(os.path.join(a.fixtures, f"memprof-{slug}.json"), "w") as f:
        json.dump(fixture, f, separators=(",", ":"), sort_keys=True)


def gpu_name():
    """The GPU, its driver and CUDA version as nvidia-smi names them ("host" without one)."""
    if not shutil.which("nvidia-smi"):
        return "host"
    p = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True,
                       text=True)
    return p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else "unknown"


def plan_part(a, env, tmp):
    part = Part("plan")
    meta = like("meta", a.multi)
    print(f"### plan: dp plan --devices {meta} against dp memprof --devices {a.multi}\n")
    print("Target: every device's planned peak within [1.00x, 1.05x] of memprof's on the devices; every category\n"
          "but workspace equal (a plan counts dp's own workspace bound, the devices what the libraries took).\n")
    print("| run | device | memprof peak MiB | plan peak MiB | plan / memprof | categories but workspace | "
          "workspace MiB memprof / plan |")
    print("|---|---|---|---|---|---|---|")
    train_rows = {}
    for flags in plan_runs(a):
        name = " ".join(os.path.basename(f) if f.endswith(".json") else f for f in flags)
        reports = {}
        for command, devices in (("memprof", a.multi), ("plan", meta)):
            path = os.path.join(tmp, f"{command}.json")
            rc, _, err = run([a.dp, command, "--devices", devices, "--steps", "2", "--json", path] + flags, env)
            if rc != 0:
                part.fail(f"{name}: dp {command} exit {rc}: {last_line(err)}")
                break
            reports[command] = json.load(open(path))
        if "memprof" in reports and a.fixtures:
            write_fixture(a, flags, a.multi, reports["memprof"])
        if len(reports) < 2:
            continue
        for real, planned in zip(reports["memprof"]["devices"], reports["plan"]["devices"]):
            rest = {k: (v, planned["at_peak"][k]) for k, v in real["at_peak"].items() if k != "workspace"}
            differing = {k: v for k, v in rest.items() if v[0] != v[1]}
            same = "equal" if not differing else ", ".join(f"{k} {mib(x)} / {mib(y)}" for k, (x, y) in differing.items())
            over = planned["peak_bytes"] / real["peak_bytes"] if real["peak_bytes"] else 1.0
            print(f"| {name} | {real['index']} | {mib(real['peak_bytes'])} | {mib(planned['peak_bytes'])} | "
                  f"{over:.3f}x | {same} | {mib(real['at_peak']['workspace'])} / "
                  f"{mib(planned['at_peak']['workspace'])} |", flush=True)
            if differing:
                part.fail(f"{name}, device {real['index']}: {same}")
            if not 1.0 <= over <= 1.05:
                part.fail(f"{name}, device {real['index']}: plan / memprof {over:.3f}x (target [1.00x, 1.05x])")
            if real["peak_phase"] != planned["peak_phase"]:
                part.notes.append(f"{name}, device {real['index']}: peak in {real['peak_phase']} on the devices, "
                                  f"{planned['peak_phase']} planned")
        train_rows[name] = train_against_memprof(a, env, tmp, flags, reports["memprof"], part)
    print(f"\ndp train on {a.multi}, 2 steps, against dp memprof: each device's peak in step 2 (MiB)\n")
    print("| run | memprof | train --host-sync phase (every phase equal?) | train --host-sync step (CUDA's default) |")
    print("|---|---|---|---|")
    for name, row in train_rows.items():
        print(f"| {name} | {row[0]} | {row[1]} | {row[2]} |", flush=True)
    if not os.path.exists(a.model_file):
        part.notes.append(f"no model file row ({a.model_file} is missing)")
    return part.verdict()


def train_against_memprof(a, env, tmp, flags, report, part):
    """dp train's peaks on the same devices waiting per phase (each phase must be memprof's) and per step."""
    timeline = {(e["step"], e["phase"]): [d["peak"] for d in e["devices"]] for e in report["timeline"]}
    step2 = [max(p[d] for (step, _), p in timeline.items() if step == 2) for d in range(len(report["devices"]))]
    cells = [" ".join(mib(b) for b in step2)]
    for sync in ("phase", "step"):
        metrics = os.path.join(tmp, f"train-{sync}.jsonl")
        rc, _, err = run([a.dp, "train", "--devices", a.multi, "--steps", "2", "--host-sync", sync, "--metrics", metrics]
                         + flags, env)
        if rc != 0:
            part.fail(f"{' '.join(flags)}: dp train --host-sync {sync} exit {rc}: {last_line(err)}")
            cells.append(f"exit {rc}")
            continue
        rows = [json.loads(line) for line in open(metrics) if '"step"' in line]
        peaks = " ".join(mib(b) for b in rows[-1].get("peak_bytes", []))
        if sync == "phase":
            seen = {(r["step"], ph): v for r in rows for ph, v in r.get("phase_peak_bytes", {}).items()}
            same = seen == timeline
            if not same:
                part.fail(f"{' '.join(flags)}: dp train --host-sync phase's per-phase peaks differ from memprof's")
            peaks += " (equal)" if same else " (DIFFERENT)"
        cells.append(peaks)
    return cells


def train(a, env, tmp, tag, devices, flags, steps):
    """A dp train run's metrics and saved weights, or None after naming its failure."""
    metrics, weights = os.path.join(tmp, f"{tag}.jsonl"), os.path.join(tmp, f"{tag}.safetensors")
    rc, _, err = run([a.dp, "train", "--devices", devices, "--steps", str(steps), "--metrics", metrics, "--save",
                      weights] + flags, env)
    return (metrics, weights, None) if rc == 0 else (None, None, f"exit {rc}: {last_line(err)}")


def compare(a, env, one, other, calibrate=None):
    """compare_runs.py's verdict of two runs (each (metrics, weights)) and its lines."""
    cmd = [sys.executable, os.path.join(HERE, "compare_runs.py"), *one, *other]
    if calibrate:
        cmd += ["--calibrate", *calibrate[0], *calibrate[1]]
    rc, out, err = run(cmd, env)
    text = " ".join((out + err).split())
    # Its measures, short: "loss 0.00e+00 (tolerance 0.001), weights 0.00e+00 (tolerance 0.001)".
    found = re.findall(r"(loss|weights): .*?largest (?:relative )?difference ([0-9.e+-]+).*?tolerance ([0-9.e+-]+)", text)
    said = ", ".join(f"{what} {diff} (tolerance {tol})" for what, diff, tol in found) or text[:300]
    return rc == 0, said


def zero_part(a, env, tmp):
    part = Part("zero")
    host = like("host", a.multi)
    steps = 4 if a.small else 20
    flags = GPT_SMALL + ["--batch", "16", "--seed", "3"]
    print(f"### zero: ZeRO's stages on {a.multi} against {host} and against --sync allreduce, {steps} steps\n")
    print(f"| --sync | {a.multi} against {host} | against allreduce on {a.multi} |")
    print("|---|---|---|")
    # Each run by name: its devices and flags; zero2 on host with 2 threads a device calibrates the tolerance.
    plan = {"allreduce": (a.multi, ["--sync", "allreduce"]), "zero2-t2": (host, ["--sync", "zero2", "--threads-per-device", "2"])}
    for stage in ("zero1", "zero2", "zero3"):
        for devices in (a.multi, host):
            plan[f"{stage}@{devices}"] = (devices, ["--sync", stage])
    runs = {}
    for key, (devices, extra) in plan.items():
        m, w, error = train(a, env, tmp, re.sub(r"[:@]", "_", key), devices, flags + extra, steps)
        if error:
            part.fail(f"{key}: {error}")
        runs[key] = None if error else (m, w)
    calibrate = (runs[f"zero2@{host}"], runs["zero2-t2"]) if runs.get("zero2-t2") and runs.get(f"zero2@{host}") else None
    for stage in ("zero1", "zero2", "zero3"):
        gpu, cpu, ddp = runs.get(f"{stage}@{a.multi}"), runs.get(f"{stage}@{host}"), runs.get("allreduce")
        cells = []
        for other, cal in ((cpu, calibrate), (ddp, None)):
            if not gpu or not other:
                cells.append("not run")
                continue
            ok, said = compare(a, env, gpu, other, cal)
            cells.append(("within tolerance: " if ok else "OUTSIDE tolerance: ") + said)
            if not ok:
                part.fail(f"{stage}: {said}")
        print(f"| {stage} | {cells[0]} | {cells[1]} |", flush=True)
    gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ") if shutil.which(
        "nvidia-smi") else 0
    if gpus >= 2 and shutil.which("mpirun"):
        mpi = ["mpirun", "--allow-run-as-root", "-np", "2", a.dp, "train", "--devices", "cuda", "--steps", str(steps),
               "--sync", "zero2"] + flags
        rc, _, err = run(mpi, env)
        print(f"\nmpirun -np 2, one GPU a rank, --sync zero2 (NCCL's ReduceScatter and AllGather): exit {rc}"
              f"{'' if rc == 0 else ': ' + last_line(err)}")
        if rc != 0:
            part.fail(f"mpirun zero2: exit {rc}")
    else:
        part.notes.append(f"ZeRO across processes not run: it takes one GPU a rank ({gpus} GPU here"
                          f"{', no mpirun' if not shutil.which('mpirun') else ''})")
    return part.verdict()


def one_update(a, env, tmp, part, model_file, batch, extra=()):
    """One update of a model file on a.pair against the same on host devices, well posed: every run
    starts from the same weights (a first run's, at lr 0), each device takes a chunk of batch / 2
    samples, and the update (weights and buffers after the step, less where they started) is compared
    tensor by tensor, each against its own largest change. The tolerance is the float32 spread of the
    same step measured on host devices, 10x: the same run with 2 threads a device (another
    summation order) and from weights perturbed by 1e-7 relative (about one rounding; two draws).
    Returns the table's row."""
    host, tag = like("host", a.pair), os.path.splitext(os.path.basename(model_file))[0]
    flags = ["--model", model_file, "--batch", str(batch), "--seed", "5", *extra]
    init = os.path.join(tmp, f"{tag}-start.safetensors")
    rc, _, err = run([a.dp, "train", "--devices", "host:1", "--steps", "1", "--lr", "0", "--save", init] + flags, env)
    if rc != 0:
        part.fail(f"{tag}: the starting weights (dp train at lr 0): exit {rc}: {last_line(err)}")
        return f"| {tag} | {batch} | not run | | | |"
    plan = {"gpu": (a.pair, init, []), "host": (host, init, []), "threads": (host, init, ["--threads-per-device", "2"])}
    for draw in (1, 2):
        perturbed = os.path.join(tmp, f"{tag}-start-perturbed{draw}.safetensors")
        weights_file.perturbed_copy(init, perturbed, 1e-7, seed=10 + draw)
        plan[f"perturbed{draw}"] = (host, perturbed, [])
    runs = {}
    for key, (devices, start, more) in plan.items():
        m, w, error = train(a, env, tmp, f"{tag}-{key}", devices, flags + ["--init", start] + more, 1)
        if error:
            part.fail(f"{tag} on {devices}{' ' + ' '.join(more) if more else ''}: {error}")
            return f"| {tag} | {batch} | not run: {error} | | | |"
        runs[key] = (m, w, start)

    def drift(x, y):
        (mx, wx, sx), (my, wy, sy) = runs[x], runs[y]
        loss = compare_runs.loss_drift(mx, my)
        update = compare_runs.update_drift(wx, sx, wy, sy)
        if loss is None or isinstance(update, str):
            part.fail(f"{tag}: {x} against {y}: {update if isinstance(update, str) else 'the steps differ'}")
            return None
        return loss[0], update[0], update[1]

    measured = {k: drift("host", k) for k in ("threads", "perturbed1", "perturbed2", "gpu")}
    if None in measured.values():
        return f"| {tag} | {batch} | not compared | | | |"
    spreads = [measured[k] for k in ("threads", "perturbed1", "perturbed2")]
    spread_loss, spread_update = max(s[0] for s in spreads), max(s[1] for s in spreads)
    # 10x the spread; a spread of exactly 0 (a run that no reordering moved) leaves one float32 ulp.
    tol_loss, tol_update = 10 * max(spread_loss, 6e-8), 10 * max(spread_update, 6e-8)
    loss, update, where = measured["gpu"]
    ok = loss <= tol_loss and update <= tol_update
    if not ok:
        part.fail(f"{tag}: loss {loss:.2e} (tolerance {tol_loss:.2e}), update {update:.2e} in {where} "
                  f"(tolerance {tol_update:.2e})")
    return (f"| {tag} | {batch} ({host} chunks of {batch // 2}) | loss {loss:.2e}, update {update:.2e} ({where}) | "
            f"threads: {measured['threads'][0]:.1e} / {measured['threads'][1]:.1e}; 1e-7 start: "
            f"{max(measured['perturbed1'][0], measured['perturbed2'][0]):.1e} / "
            f"{max(measured['perturbed1'][1], measured['perturbed2'][1]):.1e} | "
            f"{tol_loss:.1e} / {tol_update:.1e} | {'within' if ok else 'OUTSIDE'} |")


def file_part(a, env, tmp):
    part = Part("file")
    host = like("host", a.pair)
    print(f"### file: model files on {a.pair} against {host}, one update from the same weights\n")
    print("Loss of the step, and the update (weights and buffers after it, less where they started) tensor by\n"
          "tensor, |difference| / |update| in the Euclidean norm, worst tensor named; the tolerance is 10x the\n"
          f"float32 spread the same step shows on {host} (2 threads a device; weights perturbed by 1e-7 relative,\n"
          "two draws). In a network of ReLUs and max pools that spread is large: a rounding moves a few units\n"
          "across a kink.\n")
    print("| model file | batch | GPU against host: loss, update | spread: loss / update | tolerance | verdict |")
    print("|---|---|---|---|---|---|")
    # The convolutional network and the transformer: each missing one fails the part, naming the kit.
    for path, batch in ((a.model_file, 4 if a.small else 32), (a.transformer_file, 4 if a.small else 8)):
        if os.path.exists(path):
            print(one_update(a, env, tmp, part, path, batch), flush=True)
        else:
            part.fail(f"{path} is missing (tools/gpu/kit.sh exports it on the build machine)")
            print(f"| {os.path.basename(path)} | | not run: missing | | | |", flush=True)
    return part.verdict()


def memory_part(a, env, tmp):
    part = Part("memory")
    print(f"### memory: dp memprof --devices {a.gpu} against PyTorch {a.torch_device} "
          "(torch.cuda.max_memory_allocated), fp32, 2 steps\n")
    print("| model | batch | dp peak MiB | PyTorch peak MiB | dp / PyTorch | target |")
    print("|---|---|---|---|---|---|")
    for model, batch in (("resnet18", 8 if a.small else 128), ("gpt", 4 if a.small else 32)):
        path = os.path.join(tmp, "mem.json")
        rc, _, err = run([a.dp, "memprof", "--model", model, "--devices", a.gpu, "--batch", str(batch), "--steps", "2",
                          "--json", path], env)
        if rc != 0:
            part.fail(f"dp memprof {model}: exit {rc}: {last_line(err)}")
            continue
        ours = json.load(open(path))["devices"][0]["peak_bytes"]
        rc, out, err = run([sys.executable, os.path.join(ROOT, "tools", "bench", "torch_speed.py"), "--model", model,
                            "--batch", str(batch), "--device", a.torch_device, "--steps", "2", "--warmup", "0",
                            "--rotation", "1", "--deterministic"], env)
        theirs = json.loads(out.strip().splitlines()[-1]).get("max_memory_allocated") if rc == 0 else None
        if rc != 0:
            part.fail(f"PyTorch {model}: exit {rc}: {last_line(err)}")
        ratio = f"{ours / theirs:.3f}x" if theirs else "-"
        print(f"| {model} | {batch} | {mib(ours)} | {mib(theirs) if theirs else 'not measured'} | {ratio} | <= 1.0x |",
              flush=True)
        if theirs and ours > theirs:
            part.fail(f"{model}: dp {mib(ours)} MiB > PyTorch {mib(theirs)} MiB")
        if theirs is None and rc == 0:
            part.notes.append(f"{model}: PyTorch's peak not measured on {a.torch_device} (a GPU's only)")
    return part.verdict()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build-gpu/dp")
    ap.add_argument("--only", default="plan,zero,file,memory")
    ap.add_argument("--gpu", default="cuda:0", help="one device (memory)")
    ap.add_argument("--multi", default="cuda:0x4", help="several devices (plan, zero)")
    ap.add_argument("--pair", default="cuda:0x2", help="two devices (file)")
    ap.add_argument("--model-file", default=".gpu-kit/resnet50.json")
    ap.add_argument("--transformer-file", default=".gpu-kit/nanogpt.json", help="file: a transformer's model file")
    ap.add_argument("--fixtures", default="", help="plan: write each memprof report from the devices here")
    ap.add_argument("--torch-device", default="cuda")
    ap.add_argument("--small", action="store_true", help="small batches and few steps: a check of the plumbing")
    a = ap.parse_args()
    a.dp = os.path.abspath(a.dp)
    env = dict(os.environ)
    env.setdefault("OPENBLAS_CORETYPE", coretype())  # verify.py sets it; run alone, this CPU's
    parts = {"plan": plan_part, "zero": zero_part, "file": file_part, "memory": memory_part}
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.only.split(","):
            if name not in parts:
                ap.error(f"--only: no part {name!r} ({', '.join(parts)})")
            failed += parts[name](a, env, tmp)
    sys.exit(failed)


if __name__ == "__main__":
    main()
