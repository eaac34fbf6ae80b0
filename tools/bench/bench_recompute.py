"""--recompute blocks (activation checkpointing): what it saves and what it costs, in one invocation.
Prints Markdown.

For each model: `dp memprof`'s peak on device 0 and device 1 and device 1's activations, and
`dp train` samples/s (first 3 steps not timed; median of interleaved runs), with --recompute off
and blocks (for the GPT also blocks:4, half of its blocks), the same batch; then the largest batch
`dp memprof` fits under a --device-memory capacity, each way (exit 0 against exit 3, found by
bisection). dp's recompute repeats each block's forward in backward, so the expected cost is
about one forward in three of forward and backward; what it saves is every block's activations
but one block's.

For comparison, the price PyTorch (Debian's, CPU, 1 thread: faster than 2 on these machines) pays
for torch.utils.checkpoint around each block of the same GPT (tests/torch/reference.py's,
nanoGPT's): its samples/s with and without, the same batch, SGD, first 3 steps not timed.

usage: bench_recompute.py [--dp build/dp] [--repeats 3]
"""
import json
import os
import statistics
import subprocess

from dp_runs import memprof, samples_per_s, start

GPT = ["--model", "gpt", "--gpt-layers", "8", "--gpt-heads", "4", "--gpt-dim", "128", "--context", "64",
       "--generated-size", "200000"]
CASES = [  # name, model flags, batch, train steps, capacity for the largest batch, --recompute values
    ("gpt 8x128, T 64", GPT, 16, 12, "96MiB", ("off", "blocks:4", "blocks")),
    ("resnet8", ["--model", "resnet8", "--generated-size", "2048"], 64, 10, "48MiB", ("off", "blocks")),
    ("resnet18", ["--model", "resnet18", "--generated-size", "1024"], 32, 6, "320MiB", ("off", "blocks")),
]


TORCH_RUN = r"""
import sys, json, torch
import torch.utils.checkpoint as cp
sys.path.insert(0, sys.argv[1])
import reference as ref
checkpoint, steps, batch, warmup = sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4]), 3
torch.set_num_threads(1)
torch.manual_seed(0)
T, V = 64, 256
model = ref.make_model("gpt", dict(vocab=V, context=T, layers=8, heads=4, dim=128))
if checkpoint:  # each block under torch.utils.checkpoint, as dp's --recompute blocks
    for block in model.transformer.h:
        block.forward = (lambda f: lambda x: cp.checkpoint(f, x, use_reentrant=False))(block.forward)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
print(json.dumps({"samples_per_s": ref.timed_lm_steps(model, opt, V, T, batch, steps, warmup)}))
"""


def torch_speed(checkpoint, steps, batch, env):
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(["/usr/bin/python3", "-c", TORCH_RUN, os.path.join(here, "..", "..", "tests", "torch"),
                          "1" if checkpoint else "0", str(steps), str(batch)], check=True, env=env,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def torch_version():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True).stdout.strip()


def fits(dp, flags, batch, capacity, recompute, env):
    p = subprocess.run([dp, "memprof"] + flags + ["--devices", "host:2", "--batch", str(batch), "--steps", "1",
                                                  "--device-memory", capacity, "--recompute", recompute],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if p.returncode not in (0, 3):
        raise RuntimeError(f"memprof exit {p.returncode}")
    return p.returncode == 0


def largest_batch(dp, flags, capacity, recompute, env):
    lo, hi = 0, 2
    while fits(dp, flags, hi, capacity, recompute, env):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # lo fits, hi does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(dp, flags, mid, capacity, recompute, env) else (lo, mid)
    return lo


def main():
    a, env, dp = start()
    print("| model, batch (host:2) | --recompute | samples/s | speed ratio | device 0 peak | device 1 peak | "
          "device 1 activations | peak ratio (d0, d1) | largest batch under the capacity |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, flags, batch, steps, capacity, settings in CASES:
        base = flags + ["--devices", "host:2", "--batch", str(batch)]
        speed = {r: [] for r in settings}
        for _ in range(a.repeats):
            for r in speed:
                speed[r].append(samples_per_s([dp, "train"] + base + ["--recompute", r, "--steps", str(steps)], env))
        mem = {r: memprof([dp, "memprof"] + base + ["--recompute", r], env)["devices"] for r in speed}
        for r in speed:
            s, d = statistics.median(speed[r]), mem[r]
            act = d[1]["peak_by_category"]["activations"]
            largest = largest_batch(dp, flags, capacity, r, env)
            print(f"| {name}, {batch} | {r} | {s:.1f} | {s / statistics.median(speed['off']):.2f}x | "
                  f"{d[0]['peak_bytes'] / 2**20:.1f} MiB | {d[1]['peak_bytes'] / 2**20:.1f} MiB | {act / 2**20:.1f} MiB | "
                  f"{d[0]['peak_bytes'] / mem['off'][0]['peak_bytes']:.2f}x, "
                  f"{d[1]['peak_bytes'] / mem['off'][1]['peak_bytes']:.2f}x | {largest} at {capacity} |", flush=True)

    name, _, batch, steps, _, _ = CASES[0]
    print(f"\nPyTorch {torch_version()} on the same GPT ({name}, batch {batch}, 1 thread), "
          "torch.utils.checkpoint around each block:\n")
    print("| checkpoint | samples/s | speed ratio |")
    print("|---|---|---|")
    speed = {False: [], True: []}
    for _ in range(a.repeats):
        for c in speed:
            speed[c].append(torch_speed(c, steps, batch, env))
    for c in speed:
        s = statistics.median(speed[c])
        print(f"| {'each block' if c else 'off'} | {s:.1f} | {s / statistics.median(speed[False]):.2f}x |", flush=True)


if __name__ == "__main__":
    main()
