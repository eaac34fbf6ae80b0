"""A model file against the built-in it twins (target: the exported resnet8 twin at >= 0.95x
--model resnet8's samples/s on host:2), in one invocation: the twin exported with
tools/export_model.py from tests/torch/reference.py, both trained from the same weights, the steps
after the first three, median of interleaved repeats; and device 0's memory peak of each (dp
memprof). Prints Markdown.

usage: bench_model_file.py [--dp build/dp] [--repeats 5] [--steps 20] [--batch 64]
"""
import os
import statistics
import subprocess
import tempfile

from dp_runs import memprof, samples_per_s, start

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    a, env, dp = start(repeats=5, add=lambda ap: (ap.add_argument("--steps", type=int, default=20),
                                                  ap.add_argument("--batch", type=int, default=64)))
    with tempfile.TemporaryDirectory() as tmp:
        twin = os.path.join(tmp, "twin.py")
        with open(twin, "w") as f:
            f.write(f"import sys\nsys.path.insert(0, {os.path.join(HERE, '..', '..', 'tests', 'torch')!r})\n"
                    "import reference\n\ndef resnet8():\n    return reference.make_model('resnet8')\n")
        model_file, weights = os.path.join(tmp, "resnet8.json"), os.path.join(tmp, "resnet8.safetensors")
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "..", "export_model.py"), twin + ":resnet8", "--input",
                        "3x32x32", "--out", model_file, "--weights", weights], check=True, stdout=subprocess.DEVNULL)
        models = {"--model resnet8": "resnet8", "--model resnet8.json": model_file}
        common = ["--devices", "host:2", "--batch", str(a.batch), "--init", weights]
        runs = {k: [] for k in models}
        for _ in range(a.repeats):  # interleaved: a slow moment of the machine hits both alike
            for k, m in models.items():
                runs[k].append(samples_per_s([dp, "train", "--model", m, "--steps", str(a.steps)] + common, env))
        peaks = {k: memprof([dp, "memprof", "--model", m, "--devices", "host:2", "--batch", str(a.batch)],
                            env)["devices"][0]["peak_bytes"] for k, m in models.items()}
    base = statistics.median(runs["--model resnet8"])
    print(f"resnet8 (built-in) and its PyTorch twin exported as a model file, batch {a.batch}, host:2, SGD, "
          f"median of {a.repeats} interleaved runs of {a.steps} steps")
    print()
    print("| model | samples/s | / built-in | target | device 0 peak (memprof) | / built-in |")
    print("|---|---|---|---|---|---|")
    for k in models:
        s = statistics.median(runs[k])
        print(f"| {k} | {s:.1f} | {s / base:.3f}x | {'>= 0.95x' if k != '--model resnet8' else ''} | "
              f"{peaks[k] / 2**20:.2f} MiB | {peaks[k] / peaks['--model resnet8']:.3f}x |")


if __name__ == "__main__":
    main()
