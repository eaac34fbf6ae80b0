"""The GPT on host devices against PyTorch CPU, in one invocation (target: the default GPT,
4 layers, 4 heads, dim 256, context 128, at batch 32 on byte-level text, host:2 >= 1.3x PyTorch's
best of 1 or 2 threads). Both sides train the same model (tests/torch/reference.py's GPT, nanoGPT's
names) with AdamW (nanoGPT's parameter groups) on windows of the same generated corpus; the first 3 steps are not timed.
Prints Markdown.

usage: bench_gpt.py [--dp build/dp] [--steps 10] [--repeats 2] [--batch 32]
"""
import json
import os
import subprocess
import sys
import tempfile

from dp_runs import start

HERE = os.path.dirname(os.path.abspath(__file__))
WARMUP = 3


def dp_speed(dp, steps, batch, env):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        subprocess.run([dp, "train", "--model", "gpt", "--devices", "host:2", "--batch", str(batch), "--steps",
                        str(steps), "--metrics", m.name], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(m.name)][WARMUP:]
    samples = sum(sum(r["chunks"]) for r in rows)
    return samples / sum(sum(r["chunks"]) / r["samples_per_s"] for r in rows)


TORCH_RUN = r"""
import sys, json, torch
sys.path.insert(0, sys.argv[1])
import reference as ref
threads, steps, batch, warmup = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
torch.manual_seed(0)
T, V = ref.GPT_DEFAULTS["context"], ref.GPT_DEFAULTS["vocab"]
model = ref.make_model("gpt", ref.GPT_DEFAULTS)
opt = torch.optim.AdamW(ref.matrix_decay_groups(model, 0.01), lr=1e-3)  # dp's GPT default
print(json.dumps({"samples_per_s": ref.timed_lm_steps(model, opt, V, T, batch, steps, warmup)}))
"""


def torch_speed(threads, steps, batch, env):
    out = subprocess.run([sys.executable, "-c", TORCH_RUN, os.path.join(HERE, "..", "..", "tests", "torch"),
                          str(threads), str(steps), str(batch), str(WARMUP)], check=True, env=env,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def main():
    a, env, dp = start(repeats=2, add=lambda ap: (ap.add_argument("--steps", type=int, default=10),
                                                   ap.add_argument("--batch", type=int, default=32)))
    print("| model | batch | dp host:2 samples/s | PyTorch 1 thread | PyTorch 2 threads | dp / best PyTorch |")
    print("|---|---|---|---|---|---|")
    runs = []
    for _ in range(a.repeats):  # interleaved, so drift hits both alike
        runs.append((dp_speed(dp, a.steps, a.batch, env), torch_speed(1, a.steps, a.batch, env),
                     torch_speed(2, a.steps, a.batch, env)))
    ours, t1, t2 = (max(r[k] for r in runs) for k in range(3))
    print(f"| gpt (4 layers, dim 256, T 128, V 256) | {a.batch} | {ours:.1f} | {t1:.1f} | {t2:.1f} | "
          f"{ours / max(t1, t2):.2f}x |", flush=True)


if __name__ == "__main__":
    main()
