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
Table 1 also times dp with --cuda-graphs on, and the GPT (its defaults, AdamW on both sides) at 128.

Samples/s: dp's by the wall clock over the steps after the warm-up (its metrics' time_s: the work
between steps, such as loading the next batch from host memory, included; until 2026-11-26 the
steps' own times, which left it out); PyTorch's from its own timer around the same number of steps
(its batches wait on the GPU already); the median of --repeats runs, dp and PyTorch interleaved.

usage (on the GPU machine, after tools/gpu/build.sh):
  python3 tools/bench/bench_gpu.py --dp build-gpu/dp [--repeats 3] [--only 1,3]
A check of the plumbing on a CPU (tiny steps, host devices, PyTorch on the CPU):
  /usr/bin/python3 tools/bench/bench_gpu.py --dp build/dp --gpu host:1 --multi host:4 \
      --torch-device cpu --steps 4 --warmup 1 --repeats 1 --only 1,2,4 --models mlp,convnet
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


class RunFailed(Exception):
    pass


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines() or ["(no output)"]
        raise RunFailed(f"exit {p.returncode}: {lines[-1][:200]}")
    return p.stdout


def dp_rows(a, env, model, devices, batch, extra=()):
    """The metrics rows of the timed steps (after the warm-up), and the run's wall clock (time_s)
    when the warm-up ended."""
    steps = a.warmup + a.steps
    # The GPT's generated corpus is bytes: its default (a million) holds enough windows for any run here.
    size = [] if model == "gpt" else ["--generated-size", str(batch * steps)]
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        run([a.dp, "train", "--model", model, "--devices", devices, "--batch", str(batch), "--steps", str(steps),
             *size, "--metrics", m.name, *extra], env)
        rows = [json.loads(l) for l in open(m.name) if '"step"' in l]
    if len(rows) <= a.warmup:
        raise RunFailed("no timed steps in the metrics")
    return rows[a.warmup:], rows[a.warmup - 1]["time_s"] if a.warmup else 0.0


def wall_seconds(rows, start):
    """The timed steps' wall-clock time: everything between them included (loading the next batch,
    the metrics), as PyTorch's timer includes everything; a step's own samples_per_s leaves that out."""
    return rows[-1]["time_s"] - start


def dp_speed(a, env, model, devices, batch, extra=()):
    return dp_speeds(a, env, model, devices, batch, extra)[0]


def dp_speeds(a, env, model, devices, batch, extra=()):
    """Samples/s by the wall clock over the timed steps, and by their median step (a step's wall time:
    the difference of consecutive time_s, the work between steps included), which a few stalled
    steps do not move."""
    rows, start = dp_rows(a, env, model, devices, batch, extra)
    samples = [sum(r["chunks"]) for r in rows]
    ends = [r["time_s"] for r in rows]
    steps = [end - begin for begin, end in zip([start] + ends[:-1], ends)]
    return sum(samples) / wall_seconds(rows, start), statistics.median(samples) / statistics.median(steps)


def torch_speed(a, env, model, batch, precision="fp32", deterministic=False):
    out = run([sys.executable, os.path.join(HERE, "torch_speed.py"), "--model", model, "--batch", str(batch),
               "--device", a.torch_device, "--steps", str(a.steps), "--warmup", str(a.warmup),
               "--precision", precision, *(["--deterministic"] if deterministic else [])], env)
    return json.loads(out.strip().splitlines()[-1])


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


def interleaved(a, runs):
    """{name: the median of --repeats calls of runs[name], or the text of its first failure}, the
    runs interleaved repeat by repeat, so a drift of the machine hits every side alike."""
    got = {k: [] for k in runs}
    for _ in range(a.repeats):
        for k, fn in runs.items():
            if got[k] and not isinstance(got[k][-1], float):
                continue  # failed once: its error stands
            try:
                got[k].append(fn())
            except RunFailed as e:
                got[k].append(str(e))
    return {k: statistics.median(v) if v and all(isinstance(x, float) for x in v) else (v[-1] if v else None)
            for k, v in got.items()}


def vs_pytorch(a, env):
    print("### 1. dp on one device against PyTorch eager (TF32 off on both)\n")
    print(f"| model | batch | dp {a.gpu} samples/s | dp --cuda-graphs on | PyTorch samples/s | dp / PyTorch | "
          "graphs / PyTorch | target |")
    print("|---|---|---|---|---|---|---|---|")
    for model, batch, target in (("mlp", 128, 1.5), ("mlp", 1024, 1.1), ("convnet", 128, 1.5),
                                 ("convnet", 1024, 1.1), ("resnet18", 256, 1.0), ("gpt", 128, 1.0)):
        if model not in a.models:
            continue
        runs = {"usual": lambda: dp_speed(a, env, model, a.gpu, batch),
                "graphs": lambda: dp_speed(a, env, model, a.gpu, batch, ("--cuda-graphs", "on")),
                "torch": lambda: torch_speed(a, env, model, batch)["samples_per_s"]}
        ours, graphs, theirs = interleaved(a, runs).values()
        print(f"| {model} | {batch} | {cell(ours)} | {cell(graphs)} | {cell(theirs)} | {ratio(ours, theirs)} | "
              f"{ratio(graphs, theirs)} | >= {target}x |", flush=True)


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
    print(f"\n### 8. ZeRO's stages against --sync allreduce on {a.multi}: the GPT at its defaults, global batch 128 "
          "(target: zero2 >= 0.9x)\n")
    print("| --sync | samples/s | / allreduce | target |")
    print("|---|---|---|---|")
    modes = ("allreduce", "zero1", "zero2", "zero3")
    speed = interleaved(a, {m: lambda m=m: dp_speed(a, env, "gpt", a.multi, 128, ("--sync", m)) for m in modes})
    for m in modes:
        target = ">= 0.9x" if m == "zero2" else ""
        print(f"| {m} | {cell(speed[m])} | {ratio(speed[m], speed['allreduce'])} | {target} |", flush=True)


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
    tables = {"1": vs_pytorch, "2": dataparallel_overhead, "3": precision, "4": bandwidth, "5": busy, "6": graphs,
              "7": same_policy, "8": zero_stages}
    for k in a.only.split(","):
        if k not in tables:
            ap.error(f"--only: no table {k!r} (1-8)")
        tables[k](a, env)


if __name__ == "__main__":
    main()
