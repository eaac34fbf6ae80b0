"""ResNets on host devices against PyTorch CPU, in one invocation (target: resnet18 at
batch 128 on host:2 >= 1.3x PyTorch's best of 1 or 2 threads), and mlp/convnet against an older
dp binary (no slower than before a change).

usage: bench_resnet.py [--dp build/dp] [--old-dp PATH] [--steps 8] [--repeats 2] [--no-resnet]
Both sides train the same model (torchvision's BasicBlock for PyTorch) on the same generated
CIFAR-style batches with SGD (momentum 0.9); the first 3 steps are not timed. Prints Markdown.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from openblas import coretype_env, machine_line

HERE = os.path.dirname(os.path.abspath(__file__))
WARMUP = 3


def dp_speed(dp, model, steps, devices, batch, env, extra=()):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        subprocess.run([dp, "train", "--model", model, "--devices", devices, "--batch", str(batch), "--steps",
                        str(steps), "--generated-size", str(batch * steps), "--metrics", m.name, *extra], check=True,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(m.name)][WARMUP:]
    samples = sum(sum(r["chunks"]) for r in rows)
    seconds = sum(sum(r["chunks"]) / r["samples_per_s"] for r in rows)
    return samples / seconds


TORCH_RUN = r"""
import sys, time, json, torch
sys.path.insert(0, sys.argv[1])
import reference as ref
model_name, threads, steps, batch, warmup = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = ref.make_model(model_name)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(batch, 3, 32, 32)
y = torch.randint(0, 10, (batch,))
model.train()
for s in range(steps):
    if s == warmup:
        t0 = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
print(json.dumps({"samples_per_s": batch * (steps - warmup) / dt}))
"""


def torch_speed(model, threads, steps, batch, env):
    out = subprocess.run([sys.executable, "-c", TORCH_RUN, os.path.join(HERE, "..", "..", "tests", "torch"), model,
                          str(threads), str(steps), str(batch), str(WARMUP)], check=True, env=env,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build/dp")
    ap.add_argument("--old-dp", default="")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-resnet", action="store_true", help="only the comparison with --old-dp")
    a = ap.parse_args()
    env = coretype_env()
    dp = os.path.abspath(a.dp)
    print(machine_line())
    print("| model | batch | dp host:2 samples/s | PyTorch 1 thread | PyTorch 2 threads | dp / best PyTorch |")
    print("|---|---|---|---|---|---|")
    for model, batch in [] if a.no_resnet else [("resnet18", 128), ("resnet8", 128)]:
        ours = max(dp_speed(dp, model, a.steps, "host:2", batch, env) for _ in range(a.repeats))
        t1 = max(torch_speed(model, 1, a.steps, batch, env) for _ in range(a.repeats))
        t2 = max(torch_speed(model, 2, a.steps, batch, env) for _ in range(a.repeats))
        print(f"| {model} | {batch} | {ours:.1f} | {t1:.1f} | {t2:.1f} | {ours / max(t1, t2):.2f}x |", flush=True)
    if a.old_dp:
        old = os.path.abspath(a.old_dp)
        print("\n| model (host:2, batch 128, generated data) | this dp samples/s (median) | older dp (median) | ratio |")
        print("|---|---|---|---|")
        for model, steps in [("convnet", 60), ("mlp", 200)]:
            runs = []
            for _ in range(a.repeats + 1):  # interleaved, so drift hits both alike
                runs.append((dp_speed(dp, model, steps, "host:2", 128, env), dp_speed(old, model, steps, "host:2", 128, env)))
            # Medians: a single run can be far off on a shared 2-vCPU machine, either way.
            new, prev = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            print(f"| {model} | {new:.0f} | {prev:.0f} | {new / prev:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
