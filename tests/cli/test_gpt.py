"""The GPT from the command line: token files, text and the generated corpus; evaluation and
--sample; exact resume with shuffled windows, and with dropout; --recompute bit for bit; memprof's hotspot in both loss modes;
--attention fused (the explicit run's losses within bfloat16's precision, the probabilities no longer kept); bad input
(an odd-sized .bin, an id at or above --vocab, --context beyond an --init file's wpe, an empty text,
a corpus shorter than one window, flags for the wrong model).

usage: test_gpt.py DP_BINARY
"""
import json
import os
import subprocess
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli, losses  # noqa: E402

CLI = Cli()
check, run, expect = CLI.check, CLI.run, CLI.expect
SMALL = ["--gpt-layers", "1", "--gpt-heads", "2", "--gpt-dim", "16", "--context", "8"]


def write_bin(path, ids, llmc=False):
    with open(path, "wb") as f:
        if llmc:
            f.write(struct.pack("<3i", 20240520, 1, len(ids)) + bytes(1024 - 12))
        f.write(struct.pack(f"<{len(ids)}H", *ids))


with tempfile.TemporaryDirectory() as tmp:
    tok = os.path.join(tmp, "tok")
    os.makedirs(tok)
    write_bin(os.path.join(tok, "train.bin"), [(i * 7) % 300 for i in range(3000)], llmc=True)
    write_bin(os.path.join(tok, "val.bin"), [(i * 5) % 300 for i in range(400)])
    text = os.path.join(tmp, "story.txt")
    with open(text, "w") as f:
        f.write("the cat sat on the mat. " * 200)
    base = ["train", "--model", "gpt", "--devices", "host:2", "--batch", "4"] + SMALL

    # ---- token files: vocabulary from the data (300 ids -> 320), evaluation, metrics
    m = os.path.join(tmp, "m.jsonl")
    rc, out, err = run(base + ["--data", tok, "--steps", "5", "--eval", "--eval-windows", "6", "--metrics", m])
    check("token files train", rc == 0, err)
    check("vocabulary rounded up to 64", "vocabulary 320" in err, err)
    check("llm.c and nanoGPT layouts read", "3000 training and 400 validation tokens" in err, err)
    check("validation loss printed, with what was scored", "validation loss" in out and
          "over 48 predictions (6 windows of 8 from the 400 validation tokens)" in out, out)
    rows = [json.loads(l) for l in open(m)]
    check("metrics: 5 steps and an evaluation", len(losses(m)) == 5 and rows[-1].get("test_targets") == 48, rows[-1])

    # ---- text: bytes, a sample printed as text
    rc, out, err = run(base + ["--data", text, "--steps", "3", "--sample", "20", "--prompt", "the ", "--temperature",
                               "0"])
    check("text trains", rc == 0 and "vocabulary 256" in err, err)
    check("sample printed after the prompt", "sample (20 tokens, temperature 0):\nthe " in out, out)
    rc2, out2, _ = run(base + ["--data", text, "--steps", "3", "--sample", "20", "--prompt", "the ", "--temperature",
                               "0"])
    check("greedy sampling is deterministic", rc2 == 0 and out2.split("sample (")[1] == out.split("sample (")[1])
    # Bytes that are not UTF-8 are printed escaped, valid characters as they are: a lead byte past
    # U+10FFFF, an overlong form, a surrogate; é and € pass.
    prompt = b"\xf5\xbe\x9c\x8a|\xc0\xaf|\xed\xa0\x80|\xc3\xa9\xe2\x82\xac"
    p = subprocess.run([CLI.dp] + base + ["--data", text, "--steps", "1", "--sample", "1", "--prompt", prompt],
                       capture_output=True)
    check("a sample escapes every byte that is not UTF-8", p.returncode == 0 and
          b"\\xf5\\xbe\\x9c\\x8a|\\xc0\\xaf|\\xed\\xa0\\x80|\xc3\xa9\xe2\x82\xac" in p.stdout, p.stdout[-200:])
    rc, out, err = run(base + ["--data", tok, "--steps", "1", "--sample", "5", "--prompt", "1,2 3"])
    check("token-id prompt", rc == 0 and "sample (5 tokens" in out and "\n1 2 3 " in out, out + err)

    # ---- the generated corpus by default
    rc, out, err = run(base + ["--steps", "2", "--generated-size", "20000"])
    check("generated corpus", rc == 0 and "generated corpus" in err, err)

    # ---- exact resume with shuffled windows and AdamW
    ck = os.path.join(tmp, "ck")
    whole_m, whole_st = os.path.join(tmp, "whole.jsonl"), os.path.join(tmp, "whole.st")
    rc, _, err = run(base + ["--data", tok, "--steps", "6", "--checkpoint", ck, "--checkpoint-every", "3", "--metrics",
                             whole_m, "--save", whole_st])
    check("checkpointed run", rc == 0, err)
    part_m, part_st = os.path.join(tmp, "part.jsonl"), os.path.join(tmp, "part.st")
    rc, _, err = run(base + ["--data", tok, "--steps", "6", "--resume", os.path.join(ck, "step-00000003"), "--metrics",
                             part_m, "--save", part_st])
    check("resumed at step 3", rc == 0 and "at step 3" in err, err)
    check("resumed: bitwise the same weights", open(part_st, "rb").read() == open(whole_st, "rb").read())
    check("resumed: the same losses", losses(part_m) == losses(whole_m)[3:], (losses(part_m), losses(whole_m)))
    state = json.load(open(os.path.join(ck, "step-00000003", "state.json")))
    check("checkpoint names the GPT's sizes", state.get("gpt", {}).get("context") == 8, state)
    expect("resume with another context", base[:-1] + ["12", "--data", tok, "--steps", "6", "--resume",
                                                                 os.path.join(ck, "step-00000003")], 1, "context")

    # ---- dropout: named in the header; a run resumed at step 3 draws the masks the whole run drew
    # (they follow the step), and evaluation does not drop (dp eval of the weights: the run's own)
    drop = ["--dropout", "0.2", "--data", tok, "--steps", "6", "--eval-every", "6", "--eval-windows", "6"]
    ckd = os.path.join(tmp, "ck-dropout")
    d_whole_m, d_whole_st, d_part_m, d_part_st = (os.path.join(tmp, "dropout-" + f) for f in (
        "whole.jsonl", "whole.st", "part.jsonl", "part.st"))
    rc, out, err = run(base + drop + ["--checkpoint", ckd, "--checkpoint-every", "3", "--metrics", d_whole_m, "--save",
                                      d_whole_st])
    check("dropout trains, named in the header", rc == 0 and "dropout 0.2 on host:2" in err, err)
    evaluated = [line for line in out.splitlines() if "validation loss" in line]
    rc, _, err = run(base + drop + ["--resume", ckd + "/step-00000003", "--metrics", d_part_m, "--save", d_part_st])
    check("dropout: resumed at step 3", rc == 0, err)
    check("dropout: resumed, bitwise the same weights", open(d_part_st, "rb").read() == open(d_whole_st, "rb").read())
    check("dropout: resumed, the same losses", losses(d_part_m) == losses(d_whole_m)[3:],
          (losses(d_part_m), losses(d_whole_m)))
    # ---- --recompute blocks: the same training bit for bit, dropout's masks included; a run
    # checkpointed without it resumes with it
    r_m, r_st, rp_st = (os.path.join(tmp, "recompute-" + f) for f in ("whole.jsonl", "whole.st", "part.st"))
    rc, _, err = run(base + drop + ["--recompute", "blocks", "--metrics", r_m, "--save", r_st])
    check("recompute: the same weights and losses", rc == 0 and open(r_st, "rb").read() == open(d_whole_st, "rb").read()
          and losses(r_m) == losses(d_whole_m), err)
    check("recompute: named in the header", "batch 4, recomputing every block (1), adamw" in err, err)
    rc, _, err = run(base + drop + ["--recompute", "blocks", "--resume", ckd + "/step-00000003", "--save", rp_st])
    check("recompute: resumes a run that did not", rc == 0 and open(rp_st, "rb").read() == open(d_whole_st, "rb").read(),
          err)
    without = os.path.join(tmp, "without.jsonl")
    rc, _, err = run(base + ["--data", tok, "--steps", "6", "--metrics", without])
    check("dropout changes the training losses", rc == 0 and losses(without) != losses(d_whole_m), err)
    rc, out, err = run(["eval", "--model", "gpt", "--devices", "host:2", "--batch", "4", "--data", tok,
                        "--eval-windows", "6", "--weights", d_whole_st] + SMALL)
    check("dropout: dp eval of the weights says what the run said (evaluation does not drop)",
          rc == 0 and len(evaluated) == 1 and evaluated[0].split("validation loss")[1] in out, (evaluated, out, err))

    # ---- --init: a saved GPT loads back; another --context names wpe
    rc, _, err = run(base + ["--data", tok, "--steps", "1", "--init", whole_st])
    check("--init from a saved GPT", rc == 0, err)
    expect("--init with a larger --context", base[:-1] + ["16", "--data", tok, "--steps", "1", "--init",
                                                                  whole_st], 2, "wpe holds another number of positions")

    # ---- memprof: the gathered logits [B, T, V] on device 0, and in-replica without them
    def excess(loss):
        j = os.path.join(tmp, f"mp-{loss}.json")
        rc, _, err = run(["memprof", "--model", "gpt", "--devices", "host:4", "--batch", "8", "--data", tok,
                          "--vocab", "4096", "--loss", loss, "--json", j] + SMALL)
        check(f"memprof {loss}", rc == 0, err)
        return json.load(open(j))["gpu0_excess"] if rc == 0 else 0
    gathered, in_replica = excess("gathered"), excess("in-replica")
    check("memprof: gathered logits make device 0 the hotspot", gathered > 1.5, gathered)
    # What is left is the master state (parameters, gradients, optimizer state), large beside this tiny model's
    # activations; tools/bench/RESULTS.md has the figures at full sizes.
    check("memprof: in-replica loss lowers it", in_replica < gathered - 1, (gathered, in_replica))
    # ---- --attention fused: flash attention's kernels (bf16, heads of 32), the same function in less memory
    wide = ["--gpt-layers", "2", "--gpt-heads", "2", "--gpt-dim", "64", "--context", "32", "--precision", "bf16"]
    att = {}
    for a in ("explicit", "fused"):
        m = os.path.join(tmp, f"att-{a}.jsonl")
        rc, out, err = run(base[:-len(SMALL)] + wide + ["--data", tok, "--steps", "4", "--attention", a, "--metrics", m])
        check(f"--attention {a} trains", rc == 0, err)
        att[a] = losses(m) if rc == 0 else []
    check("--attention fused: named in the header", "fused attention on host:2" in err, err)
    check("--attention fused: the explicit run's losses within bfloat16's precision, not its bits",
          len(att["fused"]) == 4 and att["fused"] != att["explicit"] and
          all(abs(a - b) <= 1e-2 * b for a, b in zip(att["fused"], att["explicit"])), att)
    peaks = {}
    for a in ("explicit", "fused"):
        j = os.path.join(tmp, f"plan-{a}.json")
        rc, _, err = run(["plan", "--model", "gpt", "--devices", "meta:2", "--batch", "8", "--vocab", "320",
                          "--attention", a, "--json", j] + wide)
        check(f"plan --attention {a}", rc == 0, err)
        peaks[a] = json.load(open(j))["devices"][1]["at_peak"]["activations"] if rc == 0 else 0
    # each of 2 blocks keeps [4 samples, 2 heads, 32, 32] bf16 probabilities explicit, [4, 2, 32] float32 fused
    check("plan --attention fused: each block's probabilities no longer kept",
          peaks["explicit"] - peaks["fused"] == 2 * (4 * 2 * 32 * 32 * 2 - 4 * 2 * 32 * 4), peaks)
    # with --dropout the training forward stays explicit (the fused kernels take no dropout), while an
    # evaluation (which does not drop) takes the fused one: the training is the explicit run's, bit for bit
    same = []
    for a in ("explicit", "fused"):
        st = os.path.join(tmp, f"drop-{a}.safetensors")
        rc, out, err = run(base[:-len(SMALL)] + wide + ["--data", tok, "--steps", "3", "--dropout", "0.1", "--eval-every",
                                                        "1", "--eval-windows", "4", "--attention", a, "--save", st])
        check(f"--attention {a} with --dropout and evaluations trains", rc == 0, err)
        same.append(open(st, "rb").read() if rc == 0 else a)
    check("--attention fused with --dropout: the explicit run's weights, an evaluation's fused pass between steps "
          "notwithstanding", same[0] == same[1])
    expect("--attention flash", base + ["--attention", "flash"], 2, "--attention 'flash': expected explicit or fused")
    expect("--attention with mlp", ["train", "--model", "mlp", "--attention", "fused"], 2, "--model mlp takes no attention")
    rc, out, err = run(["demo", "--model", "gpt", "--devices", "host:2", "--batch", "3", "--data", tok] + SMALL)
    check("demo narrates a GPT step", rc == 0 and "token ids" in out and "[3, 8, 320]" in out, out + err)
    check("demo: the loss gradient divides by the batch's tokens", "divided by 24 tokens" in out, out)
    rc, out, err = run(["demo", "--model", "gpt", "--devices", "host:2", "--batch", "3", "--data", tok, "--vocab",
                        "4100"] + SMALL)
    check("demo: a vocabulary padded in the logits' rows says so", rc == 0 and "[3, 8, 4160]" in out and
          "stored 4160 wide: the 4100 classes" in out, out + err)
    rc, out, err = run(["demo", "--model", "gpt", "--devices", "host:2", "--batch", "3", "--accumulate", "2",
                        "--data", tok] + SMALL)
    check("demo narrates accumulated micro-batches", rc == 0 and "Micro-batch 2 of 2" in out
          and "over the step's 48 tokens" in out and "divided by 48 tokens" in out, out + err)

    # ---- bad input
    odd = os.path.join(tmp, "odd")
    os.makedirs(odd)
    with open(os.path.join(odd, "train.bin"), "wb") as f:
        f.write(b"\x01\x02\x03")
    write_bin(os.path.join(odd, "val.bin"), [1])
    expect("odd-sized .bin", base + ["--data", odd, "--steps", "1"], 1, "an odd size")
    expect("id at or above --vocab", base + ["--data", tok, "--steps", "1", "--vocab", "256"], 2,
           "train.bin: token id 259 at position 37 is at or above --vocab 256")
    expect("--vocab above uint16", base + ["--data", tok, "--vocab", "70000"], 2, "--vocab")
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "w").close()
    expect("empty text", base + ["--data", empty], 1, "empty text")
    short = os.path.join(tmp, "short.txt")
    with open(short, "w") as f:
        f.write("01234")
    expect("corpus shorter than a window", base + ["--data", short], 1, "shorter than one window of --context 8")
    expect("corpus shorter than a batch", base + ["--data", text, "--batch", "1000"], 1,
           "do not fill one batch of 1000 windows")
    expect("validation shorter than a window", base + ["--data", os.path.join(tmp, "story.txt"), "--context",
                                                                "600", "--eval"], 1, "validation tokens, shorter")
    mnist = os.path.join(tmp, "mnist")
    os.makedirs(mnist)
    open(os.path.join(mnist, "train-images-idx3-ubyte.gz"), "wb").close()
    expect("gpt on image data", base + ["--data", mnist], 2, "holds image data")
    expect("mlp on token data", ["train", "--model", "mlp", "--data", tok], 2, "holds text or token files")
    expect("--context with mlp", ["train", "--model", "mlp", "--context", "8"], 2, "--model mlp takes none")
    expect("--dropout with mlp", ["train", "--model", "mlp", "--dropout", "0.1"], 2, "--model mlp takes none")
    expect("--dropout 1", base + ["--dropout", "1"], 2, "--dropout must be in [0, 1)")
    expect("--dropout negative", base + ["--dropout", "-0.1"], 2, "--dropout must be in [0, 1)")
    expect("--sample with mlp", ["train", "--model", "mlp", "--sample", "5"], 2, "needs a language model")
    expect("dim not a multiple of heads", base + ["--gpt-heads", "3"], 2, "not a multiple of --gpt-heads 3")
    expect("bad token prompt", base + ["--data", tok, "--steps", "1", "--sample", "3", "--prompt", "1,x"], 2,
           "'x' is not a token id")
    expect("prompt id beyond the vocabulary", base + ["--data", tok, "--steps", "1", "--sample", "3",
                                                              "--prompt", "999"], 2, "'999' is not a token id")
    expect("negative temperature", base + ["--temperature", "-1"], 2, "--temperature")
    expect("--augment on tokens", base + ["--data", tok, "--augment"], 2, "--augment")
CLI.finish()
