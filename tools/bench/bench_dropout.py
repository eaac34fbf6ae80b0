"""The GPT's --dropout: what it costs and what it is for, in one invocation. Prints Markdown.

Cost: `dp train` samples/s (first 3 steps not timed; median of interleaved runs) and `dp memprof`'s
device-0 peak, at --dropout 0 and 0.2, the same model and batch. dp keeps no masks (backward draws
them again), so the memory is the dropped tensors themselves.

Effect: a GPT trained for many epochs on a small real text (the GPL's 35 KB, Debian's
/usr/share/common-licenses/GPL-3, as bytes: the first 90% to train on, the rest to validate),
without and with dropout, at two seeds: the lowest validation loss of the evaluations
(--eval-every) and the last one. Without dropout such a model memorises the text and its
validation loss climbs back; dropout is what nanoGPT's small-data configs (shakespeare_char: 0.2)
use against that.

usage: bench_dropout.py [--dp build/dp] [--repeats 3] [--epochs 30]
"""
import os
import statistics

from dp_runs import memprof, samples_per_s, start, train_rows

TEXT = "/usr/share/common-licenses/GPL-3"
MODEL = ["--model", "gpt", "--gpt-layers", "4", "--gpt-heads", "4", "--gpt-dim", "128", "--context", "64"]


def main():
    a, env, dp = start(add=lambda ap: ap.add_argument("--epochs", type=int, default=30))

    print("| --dropout | samples/s | speed ratio | device 0 peak | peak ratio |")
    print("|---|---|---|---|---|")
    base = MODEL + ["--devices", "host:2", "--batch", "16"]
    speed = {p: [] for p in ("0", "0.2")}
    for _ in range(a.repeats):
        for p in speed:
            speed[p].append(samples_per_s([dp, "train"] + base + ["--dropout", p, "--steps", "12",
                                                                  "--generated-size", "200000"], env))
    mem = {p: memprof([dp, "memprof"] + base + ["--dropout", p, "--generated-size", "200000"], env)["devices"][0]
           ["peak_bytes"] for p in speed}
    for p in speed:
        s, m = statistics.median(speed[p]), mem[p]
        print(f"| {p} | {s:.1f} | {s / statistics.median(speed['0']):.2f}x | {m / 2**20:.1f} MiB | "
              f"{m / mem['0']:.2f}x |", flush=True)

    if not os.path.exists(TEXT):
        print(f"\n{TEXT} is missing: no effect measured")
        return
    print(f"\n{a.epochs} epochs on {TEXT} (bytes), AdamW lr 0.001, batch 16, host:2, evaluated every 50 steps:\n")
    print("| --dropout | seed | lowest validation loss (after step) | last validation loss | last training loss |")
    print("|---|---|---|---|---|")
    for seed in ("0", "1"):
        for p in ("0", "0.2"):
            rows = train_rows([dp, "train"] + MODEL + ["--data", TEXT, "--devices", "host:2", "--batch", "16",
                                                        "--epochs", str(a.epochs), "--eval-every", "50",
                                                        "--eval-windows", "64", "--dropout", p, "--seed", seed], env)
            evals = [r for r in rows if "test_loss" in r]
            best = min(evals, key=lambda r: r["test_loss"])
            print(f"| {p} | {seed} | {best['test_loss']:.3f} ({best['after_step']}) | {evals[-1]['test_loss']:.3f} | "
                  f"{evals[-1].get('train_loss', float('nan')):.3f} |", flush=True)


if __name__ == "__main__":
    main()
