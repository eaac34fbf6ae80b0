"""dp eval: saved weights measured on the held-out data exactly as dp train --eval measured them
(the final weights, --save-best's, mixed precision, a GPT with its sample), and bad input.

usage: test_eval.py DP_BINARY
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli  # noqa: E402

CLI = Cli()
check, run, expect = CLI.check, CLI.run, CLI.expect
GPT = ["--model", "gpt", "--gpt-layers", "1", "--gpt-dim", "32", "--gpt-heads", "2", "--context", "16",
       "--generated-size", "30000", "--batch", "8", "--eval-windows", "8"]


def evaluations(metrics):
    return [json.loads(line) for line in open(metrics) if "test_loss" in line]


def evaluated(args, weights, tmp):
    """dp eval's exit code, stdout, stderr and JSON result for these flags and weights."""
    js = os.path.join(tmp, "eval.json")
    if os.path.exists(js):
        os.remove(js)
    rc, out, err = run(["eval"] + args + ["--weights", weights, "--json", js])
    return rc, out, err, json.load(open(js)) if rc == 0 else {}


with tempfile.TemporaryDirectory() as tmp:
    # The final weights and the best ones, float32 and bf16: the same loss, bit for bit, as the run's.
    for precision in ("fp32", "bf16"):
        base = ["--model", "mlp", "--devices", "host:2", "--batch", "32", "--generated-size", "512",
                "--precision", precision]
        final, best, metrics, ck = (os.path.join(tmp, f"{n}-{precision}") for n in ("final.st", "best.st", "m.jsonl",
                                                                                    "ck"))
        rc, _, err = run(["train"] + base + ["--steps", "12", "--lr", "0.5", "--eval-every", "4", "--eval", "--save",
                                             final, "--save-best", best, "--metrics", metrics, "--checkpoint", ck,
                                             "--checkpoint-every", "4", "--keep-checkpoints", "5"])
        check(f"{precision}: train runs", rc == 0, err)
        rows = evaluations(metrics) if rc == 0 else []
        rc, out, err, r = evaluated(base, final, tmp)
        check(f"{precision}: the final weights' loss is the run's last evaluation",
              rc == 0 and rows and r["test_loss"] == rows[-1]["test_loss"]
              and r["test_accuracy"] == rows[-1]["test_accuracy"] and r["test_targets"] == 4000, (err, r, rows[-1:]))
        check(f"{precision}: said as train says it", rc == 0 and "test loss" in out and "test accuracy" in out, out)
        # A checkpoint's weights, and --checkpoint's directory (its newest): the evaluation after that step.
        rc, out, err, r = evaluated(base, os.path.join(ck, "step-00000004"), tmp)
        check(f"{precision}: a checkpoint's weights give the evaluation after its step",
              rc == 0 and rows and r["test_loss"] == rows[0]["test_loss"] and rows[0]["after_step"] == 4, (err, r))
        rc, out, err, r = evaluated(base, ck, tmp)
        check(f"{precision}: --checkpoint's directory: its newest", rc == 0 and rows and
              r["test_loss"] == rows[-1]["test_loss"] and "step-00000012" in err, (err, r))
        saved = [x for x in rows if x.get("saved_best")]
        rc, out, err, r = evaluated(base, best, tmp)
        check(f"{precision}: --save-best's weights give the best evaluation's loss",
              rc == 0 and saved and r["test_loss"] == saved[-1]["test_loss"] == min(x["test_loss"] for x in rows),
              (err, r, saved))

    # A GPT: the validation loss, and the text its greedy sample continues, as the run printed them.
    gpt_st, gpt_m = os.path.join(tmp, "gpt.st"), os.path.join(tmp, "gpt.jsonl")
    rc, trained, err = run(["train"] + GPT + ["--steps", "20", "--eval", "--save", gpt_st, "--metrics", gpt_m,
                                              "--sample", "30", "--prompt", "The ", "--temperature", "0"])
    check("gpt: train runs", rc == 0, err)
    rc, out, err, r = evaluated(GPT + ["--sample", "30", "--prompt", "The ", "--temperature", "0"], gpt_st, tmp)
    rows = evaluations(gpt_m) if os.path.exists(gpt_m) else []
    check("gpt: the validation loss of the saved weights is the run's",
          rc == 0 and rows and r["test_loss"] == rows[-1]["test_loss"] and "validation loss" in out, (err, r))
    check("gpt: the same greedy sample", rc == 0 and "sample" in r and r["sample"] in trained and
          trained.split("sample (30 tokens, temperature 0):\n")[-1].startswith(r["sample"]), (out, trained[-300:]))

    # Bad input: exit 2 for flags, 1 for files.
    mlp = ["eval", "--model", "mlp", "--devices", "host:1", "--generated-size", "64", "--batch", "16"]
    final = os.path.join(tmp, "final.st-fp32")
    expect("no --weights", mlp, 2, "--weights is required")
    expect("another model's weights: both named", mlp[:2] + ["convnet"] + mlp[3:] + ["--weights", final], 2,
           f"--model convnet, but {final} holds the weights of --model mlp")
    expect("a GPT of other sizes: both named", ["eval"] + GPT[:5] + ["64"] + GPT[6:] + ["--weights", gpt_st], 2,
           f"--gpt-dim 64, but {gpt_st} was trained with --gpt-dim 32")
    expect("--sample without a language model", mlp + ["--weights", final, "--sample", "5"], 2,
           "--sample generates text")
    expect("missing weights", mlp + ["--weights", os.path.join(tmp, "nothing.st")], 1, "nothing.st")
    expect("another model's checkpoint: both named", mlp[:2] + ["convnet"] + mlp[3:] +
           ["--weights", os.path.join(tmp, "ck-fp32")], 2, "holds the weights of --model mlp")

    # The model and its sizes come from the weights' record: no flag to repeat.
    no_model = [a for a in mlp if a not in ("--model", "mlp")]
    rc, out, err = run(no_model + ["--weights", final])
    check("eval of a --save file takes its model from it", rc == 0 and out.startswith("dp eval: mlp from"), out + err)
    rc, out, err = run(no_model + ["--weights", os.path.join(tmp, "ck-fp32")])
    check("eval of a checkpoint takes its model from it", rc == 0 and out.startswith("dp eval: mlp from"), out + err)
    # eval trains nothing: a batch larger than the training set only groups the held-out samples.
    rc, out, err = run(no_model[:-1] + ["128", "--weights", final])
    check("eval --batch larger than the training set", rc == 0 and "test accuracy" in out, out + err)
    gpt_data = GPT[GPT.index("--data"):GPT.index("--data") + 2] if "--data" in GPT else []
    rc, out, err = run(["eval", "--weights", gpt_st] + gpt_data)
    check("eval of a GPT's --save file takes its sizes from it", rc == 0 and "1 layers, 2 heads, dim 32, context 16" in out,
          out + err)
    expect("a wrong --gpt-heads is not accepted silently", ["eval", "--weights", gpt_st, "--gpt-heads", "4"] + gpt_data,
           2, "--gpt-heads 4, but")
    for flag, value in [("--optimizer", "adamw"), ("--sync", "allreduce"), ("--bucket-mb", "4")]:
        expect(f"eval does not take the training-only {flag}", mlp + ["--weights", final, flag, value], 2,
               f"unknown option '{flag}' for dp eval")
    expect("--json over the weights", mlp + ["--weights", final, "--json", final], 2, "is the same file as --weights")
    expect("eval under a bad temperature", ["eval"] + GPT + ["--weights", gpt_st, "--temperature", "-1"], 2,
           "--temperature must be >= 0")

CLI.finish()
