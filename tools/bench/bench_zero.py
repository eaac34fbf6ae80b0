"""ZeRO's stages against --sync allreduce on host devices, in one invocation (targets: zero1 and
zero2 >= 0.9x allreduce's samples/s, zero3 >= 0.75x, on host:4 with the GPT at its defaults), and
device 0's memory peak of each (dp memprof, the same GPT). Samples/s: the steps after the first
three, median of interleaved repeats. Prints Markdown.

usage: bench_zero.py [--dp build/dp] [--repeats 3] [--steps 30]
"""
import statistics

from dp_runs import memprof, samples_per_s, start

MODES = ("allreduce", "zero1", "zero2", "zero3")


def main():
    a, env, dp = start(add=lambda ap: ap.add_argument("--steps", type=int, default=30))
    gpt = ["--model", "gpt", "--devices", "host:4", "--batch", "32"]
    runs = {m: [] for m in MODES}
    for _ in range(a.repeats):  # interleaved: a slow moment of the machine hits every mode alike
        for m in MODES:
            runs[m].append(samples_per_s([dp, "train"] + gpt + ["--steps", str(a.steps), "--sync", m], env))
    peaks = {m: memprof([dp, "memprof"] + gpt + ["--sync", m], env)["devices"][0]["peak_bytes"] for m in MODES}
    base = statistics.median(runs["allreduce"])
    print(f"GPT at its defaults (4 layers, dim 256, context 128, vocabulary 256), batch 32, host:4, AdamW, "
          f"median of {a.repeats} interleaved runs of {a.steps} steps")
    print()
    print("| --sync | samples/s | / allreduce | target | device 0 peak (memprof) | / allreduce |")
    print("|---|---|---|---|---|---|")
    for m in MODES:
        s = statistics.median(runs[m])
        target = {"zero1": ">= 0.9x", "zero2": ">= 0.9x", "zero3": ">= 0.75x"}.get(m, "")
        print(f"| {m} | {s:.1f} | {s / base:.2f}x | {target} | {peaks[m] / 2**20:.2f} MiB | "
              f"{peaks[m] / peaks['allreduce']:.2f}x |")


if __name__ == "__main__":
    main()
