#!/usr/bin/python3
"""The same outputs before and after a change that must not change them (a refactor): a matrix of dp
runs — train on every built-in model and a model file under every --sync, memprof, plan --compare,
demo and eval — whose every output is kept: saved weights byte for byte, the JSON reports and
metrics with their timings taken out, and what each printed with its times masked.

usage: same_outputs.py DP_BINARY OUT_DIR               record the runs' outputs in OUT_DIR
       same_outputs.py DP_BINARY OUT_DIR --against DIR  record, then compare with an earlier DIR:
                                                         exit 1 naming every file that differs
"""
import argparse
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# What a run prints or records that is time, not result.
TIME_KEYS = {"time_s", "samples_per_s", "seconds", "replica_ms", "ms", "elapsed_s", "phase_seconds", "load_wait_ms",
             "step_ms", "replica_seconds", "command", "wall_s", "tokens_per_s"}
TIME_TEXT = re.compile(r"\d[\d.,]*(?:e[+-]?\d+)?\s*(?:ms|µs|s\b|samples/s|tokens/s|it/s)|ETA \S+|\d+:\d\d(?::\d\d)?"
                       r"|^time per step by phase.*$|^planning: .*$", re.M)


def untimed(x):
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if k not in TIME_KEYS and not k.endswith(("_ms", "_seconds"))}
    if isinstance(x, list):
        return [untimed(v) for v in x]
    return x


def keep_json(src, dst):
    with open(src) as f:
        text = f.read()
    try:  # one JSON document, or JSON lines (metrics)
        docs = [json.loads(text)]
        lines = False
    except json.JSONDecodeError:
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        lines = True
    with open(dst, "w") as f:
        if lines:
            f.write("".join(json.dumps(untimed(d), sort_keys=True) + "\n" for d in docs))
        else:
            json.dump(untimed(docs[0]), f, sort_keys=True, indent=1)


def matrix(model_file):
    small = ["--devices", "host:2", "--batch", "8", "--steps", "3", "--seed", "4"]
    gpt = ["--model", "gpt", "--gpt-layers", "2", "--gpt-heads", "2", "--gpt-dim", "32", "--context", "16"]
    models = [["--model", m] for m in ("mlp", "convnet", "resnet8", "tiny")] + [gpt] + [["--model", model_file]]
    runs = []
    for m in models:
        name = "gpt" if m is gpt else os.path.basename(m[1]).replace(".json", "")
        for sync in ("reduce", "allreduce", "zero1", "zero2", "zero3"):
            runs.append((f"train-{name}-{sync}", ["train"] + m + small + ["--sync", sync, "--bucket-mb", "0.05"], True))
        runs.append((f"memprof-{name}", ["memprof"] + m + ["--devices", "host:3", "--batch", "12"], False))
        runs.append((f"plan-{name}", ["plan"] + m + ["--devices", "meta:4", "--batch", "16", "--compare",
                                                    "--device-memory", "64MiB", "--max-batch"], False))
        runs.append((f"demo-{name}", ["demo"] + m + ["--devices", "host:2", "--batch", "8"], False))
    runs.append(("train-convnet-bf16-accumulate", ["train", "--model", "convnet"] + small +
                 ["--precision", "bf16", "--accumulate", "2", "--split", "chunks:3,5"], True))
    runs.append(("train-resnet8-recompute-adamw", ["train", "--model", "resnet8"] + small +
                 ["--recompute", "blocks", "--optimizer", "adamw", "--sync", "allreduce", "--sync-bn"], True))
    runs.append(("memprof-oom", ["memprof", "--model", "resnet8", "--devices", "host:4", "--batch", "64",
                                 "--device-memory", "12MiB"], False))
    return runs


def record(dp, out):
    os.makedirs(out, exist_ok=True)
    # One fixed folder for the runs: weights record their model file's path, so it must not move.
    tmp = os.path.join(tempfile.gettempdir(), "dp-same-outputs")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if True:
        model_file = os.path.join(tmp, "net.json")
        with open(model_file, "w") as f:  # a small model file: conv, BatchNorm, pooling, a join, linear
            json.dump(NET, f)
        for name, args, trains in matrix(model_file):
            files = {"json": os.path.join(tmp, name + ".json")}
            extra = ["--json", files["json"]] if not trains else []
            if trains:
                files = {"safetensors": os.path.join(tmp, name + ".safetensors"),
                         "metrics": os.path.join(tmp, name + ".jsonl")}
                extra = ["--save", files["safetensors"], "--metrics", files["metrics"], "--no-shuffle"]
            p = subprocess.run([dp] + args + extra, capture_output=True, text=True, cwd=tmp)
            printed = TIME_TEXT.sub("<time>", (p.stdout + "\n--- stderr\n" + p.stderr).replace(tmp, "<tmp>"))
            with open(os.path.join(out, name + ".out"), "w") as f:
                f.write(f"exit {p.returncode}\n{printed}")
            for kind, path in files.items():
                if not os.path.exists(path):
                    continue
                dst = os.path.join(out, name + "." + kind)
                if kind == "safetensors":
                    shutil.copy(path, dst)
                else:
                    keep_json(path, dst)
        # eval of one run's weights
        weights = os.path.join(tmp, "eval-weights.safetensors")
        subprocess.run([dp, "train", "--model", "convnet", "--devices", "host:2", "--batch", "8", "--steps", "2",
                        "--save", weights], capture_output=True, cwd=tmp)
        p = subprocess.run([dp, "eval", "--weights", weights, "--json", os.path.join(tmp, "eval.json")],
                           capture_output=True, text=True, cwd=tmp)
        with open(os.path.join(out, "eval.out"), "w") as f:
            f.write(f"exit {p.returncode}\n" + TIME_TEXT.sub("<time>", p.stdout.replace(tmp, "<tmp>")))
        if os.path.exists(os.path.join(tmp, "eval.json")):
            keep_json(os.path.join(tmp, "eval.json"), os.path.join(out, "eval.json"))


NET = {"format": "dp-model", "version": 1, "name": "Net", "source": "same_outputs.py",
       "input": {"name": "x", "kind": "image", "shape": [3, 16, 16], "dtype": "float32"},
       "nodes": [{"name": "conv", "op": "conv2d", "module": "conv", "inputs": ["x"],
                  "attrs": {"in_channels": 3, "out_channels": 8, "kernel_size": [3, 3], "stride": [1, 1],
                            "padding": [1, 1], "dilation": [1, 1], "groups": 1, "bias": False,
                            "padding_mode": "zeros"}, "shape": [8, 16, 16], "where": ""},
                 {"name": "bn", "op": "batch_norm2d", "module": "bn", "inputs": ["conv"],
                  "attrs": {"num_features": 8, "eps": 1e-5, "momentum": 0.1, "affine": True,
                            "track_running_stats": True}, "shape": [8, 16, 16], "where": ""},
                 {"name": "relu", "op": "relu", "module": "relu", "inputs": ["bn"], "attrs": {}, "shape": [8, 16, 16],
                  "where": ""},
                 {"name": "add", "op": "add", "module": "", "inputs": ["relu", "conv"], "attrs": {},
                  "shape": [8, 16, 16], "where": ""},
                 {"name": "pool", "op": "adaptive_avg_pool2d", "module": "pool", "inputs": ["add"],
                  "attrs": {"output_size": [1, 1]}, "shape": [8, 1, 1], "where": ""},
                 {"name": "flatten", "op": "flatten", "module": "", "inputs": ["pool"],
                  "attrs": {"start_dim": 1, "end_dim": -1}, "shape": [8], "where": ""},
                 {"name": "fc", "op": "linear", "module": "fc", "inputs": ["flatten"],
                  "attrs": {"in_features": 8, "out_features": 10, "bias": True}, "shape": [10], "where": ""}],
       "output": "fc",
       "state": [{"name": "conv.weight", "shape": [8, 3, 3, 3], "kind": "parameter"},
                 {"name": "bn.weight", "shape": [8], "kind": "parameter"},
                 {"name": "bn.bias", "shape": [8], "kind": "parameter"},
                 {"name": "bn.running_mean", "shape": [8], "kind": "buffer"},
                 {"name": "bn.running_var", "shape": [8], "kind": "buffer"},
                 {"name": "bn.num_batches_tracked", "shape": [], "kind": "buffer"},
                 {"name": "fc.weight", "shape": [10, 8], "kind": "parameter"},
                 {"name": "fc.bias", "shape": [10], "kind": "parameter"}],
       "loss": {"kind": "cross_entropy"}}


def same(a, b):
    """Byte for byte; what a run printed, less the lines that were only time (a progress line says
    what it plans each second: how many there are depends on the machine)."""
    if filecmp.cmp(a, b, shallow=False):
        return True
    if not a.endswith(".out"):
        return False
    def text(p):
        return [line for line in open(p).read().splitlines() if line.strip() != "<time>"]
    return text(a) == text(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dp")
    ap.add_argument("out")
    ap.add_argument("--against", help="an earlier OUT_DIR to compare with")
    a = ap.parse_args()
    record(os.path.abspath(a.dp), a.out)
    names = sorted(os.listdir(a.out))
    print(f"recorded {len(names)} outputs in {a.out}")
    if not a.against:
        return 0
    theirs = sorted(os.listdir(a.against))
    differ = [n for n in names if n in theirs and not same(os.path.join(a.out, n), os.path.join(a.against, n))]
    missing = sorted(set(names) ^ set(theirs))
    for n in differ:
        print(f"differs: {n}")
    for n in missing:
        print(f"only in one: {n}")
    print(f"{len(names) - len(differ)} of {len(names)} the same" + (f"; {len(missing)} in one only" if missing else ""))
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main())
