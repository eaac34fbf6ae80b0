"""dp on a GPU against PyTorch eager on the same GPU, in one invocation (targets: GPU
verification's first figures; GPU speed; mixed precision's bf16 speed). Prints Markdown for
tools/bench/RESULTS.md, one table per question; a run that fails prints its error in its row and
the others go on.

  1. dp --devices cuda:0 vs PyTorch eager (tools/bench/torch_speed.py), same model, batch, SGD,
     TF32 off on both: mlp and convnet at batch 128 and 1024, resnet18 at 256.
     Targets: >= 1.5x at 128, >= 1.1x at 1024, >= 1.0x for resnet18.
  2. DataParallel's overhead: cuda:0x4 against cuda:0x1 at the same global batch of 1024
     (target >= 0.85x), the faithful step eager and captured (--cuda-graphs on, both sides: what
     is left once the host's per-phase work is gone), and --sync allreduce. The two sides
     interleaved repeat by repeat; beside the wall-clock ratio, the ratio of the runs' median step
     times (on an H100, 2026-11-27, one configuration's figure moved 2x between single repeats).
  3. bf16 against fp32 for resnet18 at batch 256 on cuda:0, dp and PyTorch autocast (expect >= 2x).
  4. broadcast_coalesced and reduce_add_coalesced of 64 MiB on cuda:0x4 against one device-to-device
     copy (build/comm_bandwidth; target >= 0.8x).
  5. How busy the GPU is: forward + backward GPU time (CUDA events, metrics' replica_ms) over the
     wall time per step on cuda:0, mlp and convnet at batch 128 and 1024 (a lower bound: the loss,
     the update and the copies are not counted; target >= 80% at 1024).
  6. The difference captured steps make (--cuda-graphs on against off) on cuda:0 and cuda:0x4, mlp
     and convnet at batch 128 and 1024; and how many timed steps were replays (all, once warm);
     and on with --upload-ahead off (each replay copies its batch into page-locked memory before
     its launch, instead of during the launch before).
  7. The cuDNN-bound rows of table 1 (convnet at 128 and 1024, resnet18 at 256) with the same
     algorithm policy on both sides: dp's default (--cudnn deterministic) against PyTorch with
     cudnn.deterministic, and dp --cudnn heuristic against PyTorch's default (atomics allowed).
     Its last column is table 1's ratio (each side's default); the other two say how much of a
     gap is the policy and how much the kernels.
  8. ZeRO's stages against --sync allreduce on cuda:0x4: the GPT at its defaults, global batch 128,
     AdamW (target: zero2 >= 0.9x allreduce's samples/s), interleaved repeats.
  9. Real sizes: torchvision's resnet50 at 3x224x224, batch 128 (dp runs it as a model file,
     --real-model-file; cuDNN's deterministic algorithms on both sides) and GPT-2 small at context
     1024, batch 8, fp32 and bf16, against PyTorch eager (the GPT with its attention explicit, as dp
     computes it, and through scaled_dot_product_attention, as nanoGPT runs it) and torch.compile
     (--compile: the precisions it is timed at, bf16 by default; --prime fills its cache ahead, so
     its cell is not the compilation); dp also runs nanoGPT's model.py exported at GPT-2 small's
     sizes (--real-gpt-file, AdamW as the built-in GPT) in the same repeats: its speed over dp's
     own GPT's and PyTorch eager's; then ZeRO-2 against allreduce at GPT-2 small on cuda:0x4.
     --small: the same at tiny sizes, a check of the table's plumbing on a CPU.
Table 1 also times dp with --cuda-graphs on, and the GPT (its defaults, AdamW on both sides) at 128.
Tables 1, 8 and 9 state a time budget for each row (fewer steps, one warm-up): a run is cut at its
share, a repeat that would not fit is not started, so they end in a known time (1 and 8: under 3
minutes on an H200). PyTorch's side runs in one server process (torch_speed.py --serve), imported
once; DP_DEADLINE (verify.py's clock) leaves out what would run past it.

Samples/s: dp's by the wall clock over the steps after the warm-up (its metrics' time_s: the work
between steps, such as loading the next batch from host memory, included; until 2026-11-26 the
steps' own times, which left it out); PyTorch's from its own timer around the same number of steps
(its batches wait on the GPU already); the median of --repeats runs, dp and PyTorch interleaved.

usage (on the GPU machine, after tools/gpu/build.sh):
  python3 tools/bench/bench_gpu.py --dp build-gpu/dp [--repeats 3] [--only 1,3] [--compile bf16]
  python3 tools/bench/bench_gpu.py --dp build-gpu/dp --prime      (torch.compile's cache for table 9)
A check of the plumbing on a CPU (tiny steps, host devices, PyTorch on the CPU):
  /usr/bin/python3 tools/bench/bench_gpu.py --dp build/dp --gpu host:1 --multi host:4 \
      --torch-device cpu --steps 4 --warmup 1 --repeats 1 --only 1,2,4 --models mlp,convnet
"""
import argparse
import json
import os
import platform
import select
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class RunFailed(Exception):
    pass


def deadline_left():
    """Seconds before verify.py's deadline (DP_DEADLINE, epoch seconds; 0 or unset: none)."""
    end = int(os.environ.get("DP_DEADLINE", "0") or 0)
    return end - time.time() if end else float("inf")


class Budget:
    """A table row's time budget, which it states: each run in it is cut at what is left, and a repeat
    that would not fit is not started. None of it past verify.py's deadline."""

    def __init__(self, seconds):
        self.seconds, self.start = seconds, time.monotonic()
        self.end = self.start + min(seconds, max(0.0, deadline_left() - 15))

    def left(self):
        return self.end - time.monotonic()

    def took(self):
        return time.monotonic() - self.start


UNLIMITED = None  # a run without a budget (the tables that state none)


def run(cmd, env, timeout=None):
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"cut at {timeout:.0f} s: over the row's budget")
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines() or ["(no output)"]
        raise RunFailed(f"exit {p.returncode}: {lines[-1][:200]}")
    return p.stdout


def dp_rows(a, env, model, devices, batch, extra=(), steps=None, warmup=None, timeout=None):
    """The metrics rows of the timed steps (after the warm-up), and the run's wall clock (time_s)
    when the warm-up ended. `model` is a built-in's name or a model file; steps and warm-up default
    to --steps and --warmup."""
    steps, warmup = a.steps if steps is None else steps, a.warmup if warmup is None else warmup
    total = warmup + steps
    # The GPT's generated corpus is bytes: its default (a million) holds enough windows for any run here.
    # Images: at most 16,384 drawn (drawing more took longer than a short row's time), epochs over them.
    drawn = min(batch * total, max(batch, 16384))
    size = [] if takes_tokens(model) else ["--generated-size", str(drawn), "--epochs", str(-(-batch * total // drawn))]
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        run([a.dp, "train", "--model", model, "--devices", devices, "--batch", str(batch), "--steps", str(total),
             *size, "--metrics", m.name, *extra], env, timeout)
        rows = [json.loads(l) for l in open(m.name) if '"step"' in l]
    if len(rows) <= warmup:
        raise RunFailed("no timed steps in the metrics")
    return rows[warmup:], rows[warmup - 1]["time_s"] if warmup else 0.0


def takes_tokens(model):
    """Whether a run of this model reads a token corpus: the built-in GPT, or a model file whose input
    is tokens (nanoGPT's, exported with --input tokens:T)."""
    if model == "gpt":
        return True
    if not model.endswith(".json"):
        return False
    with open(model) as f:
        return json.load(f).get("input", {}).get("kind") == "tokens"


def wall_seconds(rows, start):
    """The timed steps' wall-clock time: everything between them included (loading the next batch,
    the metrics), as PyTorch's timer includes everything; a step's own samples_per_s leaves that out."""
    return rows[-1]["time_s"] - start


def dp_speed(a, env, model, devices, batch, extra=(), **kw):
    return dp_speeds(a, env, model, devices, batch, extra, **kw)[0]


def dp_speeds(a, env, model, devices, batch, extra=(), **kw):
    """Samples/s by the wall clock over the timed steps, and by their median step (a step's wall time:
    the difference of consecutive time_s, the work between steps included), which a few stalled
    steps do not move."""
    rows, start = dp_rows(a, env, model, devices, batch, extra, **kw)
    samples = [sum(r["chunks"]) for r in rows]
    ends = [r["time_s"] for r in rows]
    steps = [end - begin for begin, end in zip([start] + ends[:-1], ends)]
    return sum(samples) / wall_seconds(rows, start), statistics.median(samples) / statistics.median(steps)


class TorchServer:
    """tools/bench/torch_speed.py --serve, started once: PyTorch is imported once for all the rows
    (a fresh process a run spent seconds of every row on it). A request past its time kills the
    server; the next one starts another."""

    def __init__(self, env):
        self.env, self.proc = env, None

    def ask(self, argv, timeout=None):
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "torch_speed.py"), "--serve"], env=self.env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True, bufsize=1)
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise RunFailed(f"cut at {timeout:.0f} s: over the row's budget" if not ready else "PyTorch ended")
        got = json.loads(line)
        if "error" in got:
            raise RunFailed(got["error"])
        return got

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def torch_speed(a, env, model, batch, precision="fp32", deterministic=False, extra=(), steps=None, warmup=None,
                timeout=None):
    """PyTorch's figures for one run (torch_speed.py's JSON), through the one server."""
    steps, warmup = a.steps if steps is None else steps, a.warmup if warmup is None else warmup
    argv = ["--model", model, "--batch", str(batch), "--device", a.torch_device, "--steps", str(steps), "--warmup",
            str(warmup), "--precision", precision, *(["--deterministic"] if deterministic else []), *extra]
    return a.torch.ask(argv, timeout)


def median_of(a, fn):
    """The median over --repeats calls, or the failure's text."""
    try:
        return statistics.median(fn() for _ in range(a.repeats))
    except RunFailed as e:
        return str(e)


def cell(v):
    return f"{v:.0f}" if isinstance(v, float) else "not run" if v is None else f"fails: {v}"


def ratio(x, y):
    return f"{x / y:.2f}x" if isinstance(x, float) and isinstance(y, float) else "-"


def interleaved(a, runs, budget=UNLIMITED):
    """{name: the median of --repeats calls of runs[name], or the text of its first failure}, the
    runs interleaved repeat by repeat, so a drift of the machine hits every side alike. With a budget
    the first repeat shares it among the runs (runs[name](timeout): each is cut at its share), a
    later repeat starts only if that run's slowest call still fits what is left; then also
    {name: how many calls made its median}."""
    got = {k: [] for k in runs}
    took = {k: 0.0 for k in runs}
    for repeat in range(a.repeats):
        names = list(runs)
        for i, k in enumerate(names):
            if got[k] and not isinstance(got[k][-1], float):
                continue  # failed once: its error stands
            if budget is not None and repeat > 0 and took[k] > budget.left():
                continue  # another repeat would pass the row's budget
            t0 = time.monotonic()
            try:
                if budget is None:
                    got[k].append(runs[k]())
                else:  # the first repeat shares what is left among the runs still to start
                    share = budget.left() / (len(names) - i) if repeat == 0 else budget.left()
                    got[k].append(runs[k](max(1.0, share)))
            except RunFailed as e:
                got[k].append(str(e))
            took[k] = max(took[k], time.monotonic() - t0)
    medians = {k: statistics.median(v) if v and all(isinstance(x, float) for x in v) else (v[-1] if v else None)
               for k, v in got.items()}
    return medians if budget is None else (medians, {k: len(v) for k, v in got.items()})


# Table 1's rows: model, batch, target, timed steps, the row's budget in seconds (dp, dp with
# --cuda-graphs on and PyTorch, interleaved, each repeat a fresh dp process, PyTorch's one server).
# Steps are chosen so that each timed run is about a second of GPU work.
TABLE1 = (("mlp", 128, 1.5, 200, 20), ("mlp", 1024, 1.1, 200, 20), ("convnet", 128, 1.5, 100, 20),
          ("convnet", 1024, 1.1, 50, 20), ("resnet18", 256, 1.0, 30, 25), ("gpt", 128, 1.0, 30, 25))


def vs_pytorch(a, env):
    print("### 1. dp on one device against PyTorch eager (TF32 off on both)\n")
    print("One warm-up step (two with --cuda-graphs on: the second is captured), then the timed steps; each row\n"
          "within the budget it states (a repeat that would not fit is not started; `n` counts dp's runs).\n")
    print(f"| model | batch | dp {a.gpu} samples/s | dp --cuda-graphs on | PyTorch samples/s | dp / PyTorch | "
          "graphs / PyTorch | target | steps | n | budget s | took s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model, batch, target, steps, seconds in TABLE1:
        if model not in a.models:
            continue
        budget = Budget(seconds)
        runs = {"usual": lambda t: dp_speed(a, env, model, a.gpu, batch, steps=steps, warmup=1, timeout=t),
                "graphs": lambda t: dp_speed(a, env, model, a.gpu, batch, ("--cuda-graphs", "on"), steps=steps,
                                             warmup=2, timeout=t),
                "torch": lambda t: torch_speed(a, env, model, batch, steps=steps, warmup=1, timeout=t)["samples_per_s"]}
        medians, n = interleaved(a, runs, budget)
        ours, graphs, theirs = medians["usual"], medians["graphs"], medians["torch"]
        print(f"| {model} | {batch} | {cell(ours)} | {cell(graphs)} | {cell(theirs)} | {ratio(ours, theirs)} | "
              f"{ratio(graphs, theirs)} | >= {target}x | {steps} | {n['usual']} | {seconds} | {budget.took():.0f} |",
              flush=True)


def same_policy(a, env):
    print("\n### 7. The cuDNN-bound rows with the same algorithm policy on both sides (TF32 off)\n")
    print("| model | batch | dp deterministic (default) | PyTorch deterministic | ratio | dp --cudnn heuristic | "
          "PyTorch default | ratio | defaults: dp / PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model, batch in (("convnet", 128), ("convnet", 1024), ("resnet18", 256)):
        if model not in a.models:
            continue
        det = median_of(a, lambda: dp_speed(a, env, model, a.gpu, batch))
        tdet = median_of(a, lambda: torch_speed(a, env, model, batch, deterministic=True)["samples_per_s"])
        heu = median_of(a, lambda: dp_speed(a, env, model, a.gpu, batch, ("--cudnn", "heuristic")))
        theu = median_of(a, lambda: torch_speed(a, env, model, batch)["samples_per_s"])
        print(f"| {model} | {batch} | {cell(det)} | {cell(tdet)} | {ratio(det, tdet)} | {cell(heu)} | {cell(theu)} | "
              f"{ratio(heu, theu)} | {ratio(det, theu)} |", flush=True)


def dataparallel_overhead(a, env):
    one = a.gpu.split(":")[0] + ":0x1" if a.gpu.startswith("cuda") else "host:1"
    print(f"\n### 2. DataParallel's overhead: {a.multi} against {one}, global batch 1024 (target >= 0.85x)\n")
    print("The two sides interleaved, each the median of the repeats; `by median step`: the same ratio from\n"
          "each run's median step time (a few stalled steps do not move it).\n")
    print(f"| model | step | {one} samples/s | {a.multi} samples/s | ratio | ratio by median step |")
    print("|---|---|---|---|---|---|")
    for model in [m for m in ("mlp", "convnet") if m in a.models]:
        for label, extra in (("faithful (--sync reduce)", ()), ("faithful, --cuda-graphs on", ("--cuda-graphs", "on")),
                             ("--sync allreduce", ("--sync", "allreduce"))):
            got = {one: [], a.multi: []}
            failed = None
            for _ in range(a.repeats):  # interleaved, so a drift of the machine hits both sides
                for devices in got:
                    try:
                        got[devices].append(dp_speeds(a, env, model, devices, 1024, extra))
                    except RunFailed as e:
                        failed = str(e)
                if failed:
                    break
            if failed:
                print(f"| {model} | {label} | fails: {failed} | | - | - |", flush=True)
                continue
            (single, single_median), (multi, multi_median) = (
                tuple(statistics.median(run[i] for run in runs) for i in (0, 1)) for runs in got.values())
            print(f"| {model} | {label} | {cell(single)} | {cell(multi)} | {ratio(multi, single)} | "
                  f"{ratio(multi_median, single_median)} |", flush=True)


def precision(a, env):
    print(f"\n### 3. bf16 against fp32: resnet18, batch 256, {a.gpu} (expect >= 2x on Hopper)\n")
    print("| | fp32 samples/s | bf16 samples/s | bf16 / fp32 |")
    print("|---|---|---|---|")
    f32 = median_of(a, lambda: dp_speed(a, env, "resnet18", a.gpu, 256))
    b16 = median_of(a, lambda: dp_speed(a, env, "resnet18", a.gpu, 256, ("--precision", "bf16")))
    print(f"| dp | {cell(f32)} | {cell(b16)} | {ratio(b16, f32)} |")
    t32 = median_of(a, lambda: torch_speed(a, env, "resnet18", 256)["samples_per_s"])
    t16 = median_of(a, lambda: torch_speed(a, env, "resnet18", 256, "bf16")["samples_per_s"])
    print(f"| PyTorch (autocast) | {cell(t32)} | {cell(t16)} | {ratio(t16, t32)} |", flush=True)


def bandwidth(a, env):
    print(f"\n### 4. Coalesced broadcast and reduce on {a.multi} against one copy (target >= 0.8x)\n")
    tool = os.path.join(os.path.dirname(a.dp), "comm_bandwidth")
    try:
        print(run([tool, a.multi, "64", "20"], env))
    except (RunFailed, OSError) as e:
        print(f"fails: {e}")


def busy(a, env):
    print(f"\n### 5. Forward + backward GPU time over the wall time per step, {a.gpu} (target >= 80% at batch 1024)\n")
    print("| model | batch | step ms | forward + backward ms (events) | share |")
    print("|---|---|---|---|---|")
    for model in [m for m in ("mlp", "convnet") if m in a.models]:
        for batch in (128, 1024):
            try:
                rows, start = dp_rows(a, env, model, a.gpu, batch)
                step = 1000 * wall_seconds(rows, start) / len(rows)
                gpu = statistics.mean(r["replica_ms"][0] for r in rows)
                print(f"| {model} | {batch} | {step:.3f} | {gpu:.3f} | {100 * gpu / step:.0f}% |", flush=True)
            except (RunFailed, KeyError) as e:
                print(f"| {model} | {batch} | fails: {e} | | |", flush=True)


def graphs(a, env):
    print("\n### 6. Captured steps: --cuda-graphs on against off\n")
    print("| model | devices | batch | off samples/s | on samples/s | on / off | timed steps replayed | "
          "on, --upload-ahead off | on / that |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in [m for m in ("mlp", "convnet") if m in a.models]:
        for devices in (a.gpu, a.multi):
            for batch in (128, 1024):
                off = median_of(a, lambda: dp_speed(a, env, model, devices, batch))
                not_ahead = median_of(a, lambda: dp_speed(a, env, model, devices, batch,
                                                          ("--cuda-graphs", "on", "--upload-ahead", "off")))
                try:
                    on, replayed = [], ""
                    for _ in range(a.repeats):
                        rows, start = dp_rows(a, env, model, devices, batch, ("--cuda-graphs", "on"))
                        on.append(sum(sum(r["chunks"]) for r in rows) / wall_seconds(rows, start))
                        replayed = f"{sum(r.get('graph') == 'replayed' for r in rows)} of {len(rows)}"
                    on = statistics.median(on)
                except RunFailed as e:
                    on = str(e)
                print(f"| {model} | {devices} | {batch} | {cell(off)} | {cell(on)} | {ratio(on, off)} | {replayed} | "
                      f"{cell(not_ahead)} | {ratio(on, not_ahead)} |", flush=True)


def zero_stages(a, env):
    seconds = 40
    print(f"\n### 8. ZeRO's stages against --sync allreduce on {a.multi}: the GPT at its defaults, global batch 128 "
          f"(target: zero2 >= 0.9x; 20 timed steps after one warm-up, budget {seconds} s)\n")
    print("| --sync | samples/s | / allreduce | target | n |")
    print("|---|---|---|---|---|")
    modes = ("allreduce", "zero1", "zero2", "zero3")
    budget = Budget(seconds)
    speed, n = interleaved(a, {m: lambda t, m=m: dp_speed(a, env, "gpt", a.multi, 128, ("--sync", m), steps=20, warmup=1,
                                                          timeout=t) for m in modes}, budget)
    for m in modes:
        target = ">= 0.9x" if m == "zero2" else ""
        print(f"| {m} | {cell(speed[m])} | {ratio(speed[m], speed['allreduce'])} | {target} | {n[m]} |", flush=True)
    print(f"\n(took {budget.took():.0f} s)")


# Table 9's sizes: GPT-2 small (nanoGPT's gpt2: 12 layers, 12 heads, width 768, context 1024,
# vocabulary 50257), dp's flags and torch_speed.py's alike; --small's, to check the table's plumbing
# on a CPU. --real-gpt-file is nanoGPT's model.py exported at the same sizes.
GPT2 = ["--gpt-layers", "12", "--gpt-heads", "12", "--gpt-dim", "768", "--context", "1024", "--vocab", "50257"]
GPT_TINY = ["--gpt-layers", "2", "--gpt-heads", "2", "--gpt-dim", "32", "--context", "16", "--vocab", "256"]


def file_input(path):
    """A model file's input as torch_speed.py's --input takes it (C x H x W)."""
    with open(path) as f:
        return "x".join(str(d) for d in json.load(f)["input"]["shape"])


def real_sizes(a, env):
    """dp against PyTorch eager and torch.compile at the sizes people train: torchvision's resnet50 at
    3x224x224 (dp runs it as a model file; the same cuDNN policy on both sides: deterministic
    algorithms, no TF32) and GPT-2 small at context 1024, fp32 and bf16 — dp's built-in GPT and
    nanoGPT's model.py as a model file, timed against the same PyTorch runs; then ZeRO-2 against
    allreduce at GPT-2 small on several devices. With --small, tiny sizes and batches."""
    gpt_flags, gpt_label = (GPT_TINY, "tiny GPT") if a.small else (GPT2, "GPT-2 small")
    print(f"\n### 9. Real sizes on {a.gpu}: dp against PyTorch eager and torch.compile (TF32 off)\n")
    print("One warm-up step, then the timed steps. PyTorch's GPT: nanoGPT's, with its attention as dp computes it\n"
          "(explicit: scores, mask, softmax) and as nanoGPT runs it on a PyTorch that has it (`sdpa`:\n"
          "scaled_dot_product_attention, flash attention); torch.compile runs the sdpa model. A compile cell's\n"
          "warm-up is the compilation, read from the cache tools/gpu/verify.py's prime fills ahead, where it did.\n"
          "`dp, nanoGPT's file`: nanoGPT's model.py exported as a model file at the same sizes (AdamW, as the\n"
          "built-in GPT), in the same interleaved repeats; `file / built-in` is its speed over dp's own GPT's.\n"
          "`dp, cuBLASLt`: the built-in GPT in 16 bits with `DP_LINEAR_GEMM=lt` (Linear's bias in the GEMM's\n"
          "epilogue), in the same repeats; `Lt / dp` its speed over the default's (cuBLAS). `dp, fused attention`:\n"
          "the built-in GPT in 16 bits with `--attention fused` (dp's flash kernels), in the same repeats; `fused / dp`\n"
          "its speed over the explicit attention's, `fused / sdpa` over PyTorch's flash attention.\n")
    print("| model | precision | batch | dp samples/s | PyTorch eager | dp / eager | eager, sdpa | dp / sdpa | "
          "torch.compile | dp / compile | compile warm-up s | dp, nanoGPT's file | file / built-in | file / eager | "
          "dp, cuBLASLt | Lt / dp | dp, fused attention | fused / dp | fused / sdpa | steps | budget s | took s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    if os.path.exists(a.real_model_file):
        rows += [("resnet50", a.real_model_file, "torchvision:resnet50", precision, 2 if a.small else 128, 10, seconds)
                 for precision, seconds in (("fp32", 45), ("bf16", 35))]
    else:
        print(f"| resnet50 | | | not run: {a.real_model_file} is missing (tools/gpu/kit.sh exports it) |"
              + " |" * 18)
    rows += [(gpt_label, "gpt", "gpt", precision, 2 if a.small else 8, steps, seconds)
             for precision, steps, seconds in (("fp32", 6, 65), ("bf16", 10, 65))]
    for label, ours, theirs, precision, batch, steps, seconds in rows:
        gpt = ours == "gpt"
        budget = Budget(seconds)
        half = ("--precision", precision) if precision != "fp32" else ()
        dp_extra = (*(gpt_flags if gpt else ()), *half)
        torch_extra = (*gpt_flags, "--rotation", "2") if gpt else ("--input", file_input(ours), "--rotation", "2")
        det = not gpt  # resnet50: cuDNN's deterministic algorithms, dp's default policy
        runs = {"dp": lambda t: dp_speed(a, env, ours, a.gpu, batch, dp_extra, steps=steps, warmup=1, timeout=t),
                "eager": lambda t: torch_speed(a, env, theirs, batch, precision, det, torch_extra, steps, 1,
                                               t)["samples_per_s"]}
        file_cell = "n/a"
        if gpt:
            runs["sdpa"] = lambda t: torch_speed(a, env, theirs, batch, precision, det,
                                                 (*torch_extra, "--attention", "sdpa"), steps, 1, t)["samples_per_s"]
            if os.path.exists(a.real_gpt_file):
                runs["file"] = lambda t: dp_speed(a, env, a.real_gpt_file, a.gpu, batch,
                                                  ("--optimizer", "adamw", "--lr", "0.001", *half), steps=steps,
                                                  warmup=1, timeout=t)
            else:
                file_cell = f"not run: {a.real_gpt_file} is missing (tools/gpu/kit.sh exports it)"
            if precision != "fp32":
                lt_env = {**env, "DP_LINEAR_GEMM": "lt"}
                runs["lt"] = lambda t: dp_speed(a, lt_env, ours, a.gpu, batch, dp_extra, steps=steps, warmup=1,
                                                timeout=t)
                runs["fused"] = lambda t: dp_speed(a, env, ours, a.gpu, batch, (*dp_extra, "--attention", "fused"),
                                                   steps=steps, warmup=1, timeout=t)
        speed, _ = interleaved(a, runs, budget)
        if "file" in speed:
            file_cell = cell(speed["file"])
        compiled, warm, compiled_cell = None, "", f"left out (--compile {a.compile})"
        if a.compile == "all" or a.compile == precision:
            # once: its warm-up is the compilation, which a repeat would pay again on a cold cache
            compile_budget = Budget(a.compile_seconds)
            try:
                got = torch_speed(a, env, theirs, batch, precision, det,
                                  (*torch_extra, *(("--attention", "sdpa") if gpt else ()), "--compile"), steps, 2,
                                  max(1.0, compile_budget.left()))
                compiled, warm = got["samples_per_s"], f"{got['warmup_s']:.0f}"
            except RunFailed as e:
                compiled = str(e)
            compiled_cell = cell(compiled)
        print(f"| {label} | {precision} | {batch} | {cell(speed['dp'])} | {cell(speed['eager'])} | "
              f"{ratio(speed['dp'], speed['eager'])} | {cell(speed['sdpa']) if gpt else 'n/a'} | "
              f"{ratio(speed['dp'], speed.get('sdpa'))} | {compiled_cell} | {ratio(speed['dp'], compiled)} | {warm} | "
              f"{file_cell} | {ratio(speed.get('file'), speed['dp'])} | {ratio(speed.get('file'), speed['eager'])} | "
              f"{cell(speed['lt']) if 'lt' in speed else 'n/a'} | {ratio(speed.get('lt'), speed['dp'])} | "
              f"{cell(speed['fused']) if 'fused' in speed else 'n/a'} | {ratio(speed.get('fused'), speed['dp'])} | "
              f"{ratio(speed.get('fused'), speed.get('sdpa'))} | "
              f"{steps} | {seconds} | {budget.took():.0f} |", flush=True)
    seconds = 50
    budget = Budget(seconds)
    batch = 8
    print(f"\nZeRO-2 against allreduce on {a.multi}, {gpt_label}, global batch {batch}, fp32, 6 timed steps "
          f"(target >= 0.9x; budget {seconds} s)\n")
    print("| --sync | samples/s | / allreduce | n |")
    print("|---|---|---|---|")
    speed, n = interleaved(a, {m: lambda t, m=m: dp_speed(a, env, "gpt", a.multi, batch, (*gpt_flags, "--sync", m),
                                                          steps=6, warmup=1, timeout=t)
                               for m in ("allreduce", "zero2")}, budget)
    for m in ("allreduce", "zero2"):
        print(f"| {m} | {cell(speed[m])} | {ratio(speed[m], speed['allreduce'])} | {n[m]} |", flush=True)
    print(f"\n(took {budget.took():.0f} s)")


def prime(a, env):
    """Fills torch.compile's cache with table 9's compiled models (--compile's precisions), one process
    each, side by side: run ahead (verify.py's prime), so the table's compile cells read it."""
    jobs = []
    precisions = ("fp32", "bf16") if a.compile == "all" else () if a.compile == "none" else (a.compile,)
    for precision in precisions:
        for theirs, extra, batch, steps in (("torchvision:resnet50", ["--input", "3x224x224", "--deterministic"], 128, 10),
                                            ("gpt", GPT2 + ["--attention", "sdpa"], 8, 6 if precision == "fp32" else 10)):
            # the very options table 9 asks for, so the compiled graphs are the same
            argv = ["--model", theirs, "--batch", str(batch), "--device", a.torch_device, "--steps", "1", "--warmup",
                    "2", "--precision", precision, "--rotation", "2", "--compile", *extra]
            if theirs == "gpt":
                argv = [x for x in argv if x != "--deterministic"]
            jobs.append((theirs, precision, subprocess.Popen([sys.executable, os.path.join(HERE, "torch_speed.py"), *argv],
                                                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                             text=True)))
    for theirs, precision, p in jobs:
        out, err = p.communicate()
        said = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"error": err.strip()[-200:]}
        print(f"prime {theirs} {precision}: " + (f"compiled, warm-up {said['warmup_s']:.0f} s" if "warmup_s" in said
                                                  else f"fails: {said.get('error')}"), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build-gpu/dp")
    ap.add_argument("--gpu", default="cuda:0", help="dp's devices for one device")
    ap.add_argument("--multi", default="cuda:0x4", help="dp's devices for DataParallel")
    ap.add_argument("--torch-device", default="cuda")
    ap.add_argument("--steps", type=int, default=50, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="1,2,3,4,5,6,7,8", help="which tables, e.g. 1,3")
    ap.add_argument("--models", default="mlp,convnet,resnet18,gpt", help="tables 1 and 2: which models")
    ap.add_argument("--real-model-file", default=".gpu-kit/resnet50-224.json", help="table 9: resnet50 at 3x224x224")
    ap.add_argument("--real-gpt-file", default=".gpu-kit/nanogpt-gpt2.json",
                    help="table 9: nanoGPT's model.py at GPT-2 small's sizes, as a model file")
    ap.add_argument("--small", action="store_true", help="table 9 at tiny sizes: a check of its plumbing on a CPU")
    ap.add_argument("--compile", default="bf16", choices=["none", "fp32", "bf16", "all"],
                    help="table 9: the precisions torch.compile is timed at")
    ap.add_argument("--compile-seconds", type=float, default=60, help="table 9: each compile cell's budget")
    ap.add_argument("--prime", action="store_true", help="only fill torch.compile's cache for table 9, then exit")
    a = ap.parse_args()
    a.dp = os.path.abspath(a.dp)
    env = dict(os.environ)
    if "avx512f" in open("/proc/cpuinfo").read():
        env.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; command: {' '.join(sys.argv)}\n")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
        print(f"GPU: {smi}\n")
    except OSError:
        pass
    if a.prime:
        prime(a, env)
        return
    tables = {"1": vs_pytorch, "2": dataparallel_overhead, "3": precision, "4": bandwidth, "5": busy, "6": graphs,
              "7": same_policy, "8": zero_stages, "9": real_sizes}
    for k in a.only.split(","):
        if k not in tables:
            ap.error(f"--only: no table {k!r} (1-9)")
    a.torch = TorchServer(env)
    try:
        for k in a.only.split(","):
            if deadline_left() < 20:
                print(f"\n### {k}. not run: {deadline_left():.0f} s left before the deadline", flush=True)
                continue
            tables[k](a, env)
    finally:
        a.torch.close()


if __name__ == "__main__":
    main()
