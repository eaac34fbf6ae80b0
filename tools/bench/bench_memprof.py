"""The GPU0 hotspot measured: dp memprof on host:4 for mlp and convnet at batch 512 and 4096,
faithful, with --split balance-memory and with --loss in-replica (target: convnet, host:4,
batch 512, device 0's peak >= 1.3x the others').

usage: bench_memprof.py [--dp build/dp] [--devices host:4]   (prints a Markdown table)
"""
import argparse
import json
import os
import subprocess
import tempfile


def mib(b):
    return f"{b / 2**20:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build/dp")
    ap.add_argument("--devices", default="host:4")
    a = ap.parse_args()
    dp = os.path.abspath(a.dp)
    print("| model | batch | mode | chunks | d0 peak MiB (phase) | largest other MiB | d0 / others |")
    print("|---|---|---|---|---|---|---|")
    for model in ["mlp", "convnet"]:
        for batch in [512, 4096]:
            for label, extra in [("faithful", []), ("balance-memory", ["--split", "balance-memory"]),
                                 ("in-replica loss", ["--loss", "in-replica"])]:
                with tempfile.NamedTemporaryFile(suffix=".json") as js:
                    subprocess.run([dp, "memprof", "--model", model, "--devices", a.devices, "--batch", str(batch),
                                    "--json", js.name] + extra, check=True, stdout=subprocess.DEVNULL)
                    r = json.load(open(js.name))
                d0 = r["devices"][0]
                other = max(d["peak_bytes"] for d in r["devices"][1:])
                chunks = ",".join(str(c) for c in r["split"])
                print(f"| {model} | {batch} | {label} | {chunks} | {mib(d0['peak_bytes'])} ({d0['peak_phase']}) | "
                      f"{mib(other)} | {r['gpu0_excess']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
