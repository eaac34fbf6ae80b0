"""A model file against the built-in it twins, in one invocation: the twin exported with
tools/export_model.py, both trained from the same weights, the steps after the first three, median
of interleaved repeats; and device 0's memory peak of each (dp memprof). Prints Markdown.

  --twin resnet8  tests/torch/reference.py's resnet8 (target: >= 0.95x --model resnet8 on host:2)
  --twin gpt      nanoGPT's model.py GPT (tests/torch/nanogpt_model.py, untied) at --model gpt's
                  defaults, on its generated corpus (target: >= 0.9x --model gpt on host:2)

usage: bench_model_file.py [--dp build/dp] [--twin resnet8|gpt] [--repeats 5] [--steps 20] [--batch 64]
"""
import os
import statistics
import subprocess
import tempfile

from dp_runs import memprof, samples_per_s, start

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    a, env, dp = start(repeats=5, add=lambda ap: (ap.add_argument("--steps", type=int, default=20),
                                                  ap.add_argument("--batch", type=int, default=64),
                                                  ap.add_argument("--twin", choices=["resnet8", "gpt"],
                                                                  default="resnet8")))
    name = a.twin
    builtin = f"--model {name}"
    with tempfile.TemporaryDirectory() as tmp:
        model_file, weights = os.path.join(tmp, f"{name}.json"), os.path.join(tmp, f"{name}.safetensors")
        if name == "resnet8":
            twin = os.path.join(tmp, "twin.py")
            with open(twin, "w") as f:
                f.write(f"import sys\nsys.path.insert(0, {os.path.join(HERE, '..', '..', 'tests', 'torch')!r})\n"
                        "import reference\n\ndef resnet8():\n    return reference.make_model('resnet8')\n")
            export = [twin + ":resnet8", "--input", "3x32x32"]
        else:  # --model gpt's defaults: vocabulary 256, context 128, 4 layers, 4 heads, width 256
            export = [os.path.join(HERE, "..", "..", "tests", "torch", "nanogpt_model.py") + ":untied", "--kwargs",
                      '{"block_size": 128, "vocab_size": 256, "n_layer": 4, "n_head": 4, "n_embd": 256}',
                      "--input", "tokens:128"]
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "..", "export_model.py"), *export, "--out", model_file,
                        "--weights", weights], check=True, stdout=subprocess.DEVNULL)
        models = {builtin: name, f"--model {name}.json": model_file}
        common = ["--devices", "host:2", "--batch", str(a.batch), "--init", weights]
        runs = {k: [] for k in models}
        for _ in range(a.repeats):  # interleaved: a slow moment of the machine hits both alike
            for k, m in models.items():
                runs[k].append(samples_per_s([dp, "train", "--model", m, "--steps", str(a.steps)] + common, env))
        peaks = {k: memprof([dp, "memprof", "--model", m, "--devices", "host:2", "--batch", str(a.batch)],
                            env)["devices"][0]["peak_bytes"] for k, m in models.items()}
    base = statistics.median(runs[builtin])
    target = ">= 0.95x" if name == "resnet8" else ">= 0.9x"
    print(f"{name} (built-in) and its PyTorch twin exported as a model file, batch {a.batch}, host:2, SGD, "
          f"median of {a.repeats} interleaved runs of {a.steps} steps")
    print()
    print("| model | samples/s | / built-in | target | device 0 peak (memprof) | / built-in |")
    print("|---|---|---|---|---|---|")
    for k in models:
        s = statistics.median(runs[k])
        print(f"| {k} | {s:.1f} | {s / base:.3f}x | {target if k != builtin else ''} | "
              f"{peaks[k] / 2**20:.2f} MiB | {peaks[k] / peaks[builtin]:.3f}x |")


if __name__ == "__main__":
    main()
