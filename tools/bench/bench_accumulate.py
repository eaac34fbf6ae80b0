"""Gradient accumulation (`--accumulate N`): the same effective batch as one batch of N·B or as N
micro-batches of B, in one invocation. Device 0's peak from `dp memprof` (and every device's
largest), and `dp train`'s samples/s from the metrics (the first 3 steps not timed; median of
interleaved runs). Prints Markdown.

usage: bench_accumulate.py [--dp build/dp] [--repeats 3]
"""
import statistics

from dp_runs import memprof, samples_per_s, start


def peaks(cmd, env):
    r = memprof(cmd, env)
    return r["devices"][0]["peak_bytes"], max(d["peak_bytes"] for d in r["devices"][1:])


def main():
    a, env, dp = start()
    print("| model | devices | --sync | step of | device 0 peak | largest other | samples/s | "
          "peak ratio (device 0) | speed ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model, devices, sync, effective, n, steps in (("mlp", "host:4", "reduce", 512, 4, 40),
                                                      ("mlp", "host:4", "allreduce", 512, 4, 40),
                                                      ("convnet", "host:4", "reduce", 512, 4, 10),
                                                      ("convnet", "host:4", "allreduce", 512, 4, 10),
                                                      ("resnet8", "host:2", "reduce", 128, 4, 6)):
        base = ["--model", model, "--devices", devices, "--sync", sync]
        if sync == "allreduce":
            base += ["--loss", "in-replica"]
        configs = (("whole", effective, 1), ("micro", effective // n, n))
        mem = {name: peaks([dp, "memprof"] + base + ["--batch", str(b), "--accumulate", str(k)], env)
               for name, b, k in configs}
        speed = {name: [] for name, _, _ in configs}
        for _ in range(a.repeats):
            for name, b, k in configs:
                speed[name].append(samples_per_s([dp, "train"] + base + [
                    "--batch", str(b), "--accumulate", str(k), "--steps", str(steps), "--generated-size",
                    str(effective * steps), "--upload-ahead", "off"], env))
        sps = {name: statistics.median(v) for name, v in speed.items()}
        for name, b, k in configs:
            label = f"{b}" if k == 1 else f"{k} x {b}"
            ratio = (f"{mem[name][0] / mem['whole'][0]:.2f}x", f"{sps[name] / sps['whole']:.2f}x") if name == "micro" \
                else ("1", "1")
            print(f"| {model} | {devices} | {sync} | {label} | {mem[name][0] / 2**20:.2f} MiB | "
                  f"{mem[name][1] / 2**20:.2f} MiB | {sps[name]:.0f} | {ratio[0]} | {ratio[1]} |", flush=True)


if __name__ == "__main__":
    main()
