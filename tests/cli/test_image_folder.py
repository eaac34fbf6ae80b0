"""--data DIR as an image folder (torchvision's ImageFolder; or train/ and val/ side by side):
dp train learns its classes with and without --augment, eval and memprof take it, a 1-channel model
takes it in gray, dp plan reads no pixel of it, and bad folders and files are named.

usage: test_image_folder.py DP_BINARY
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli  # noqa: E402

CLI = Cli()
check, run, expect = CLI.check, CLI.run, CLI.expect


def make_folder(root, per_class, seed):
    """Three classes told apart by their dominant colour, at mixed sizes, as JPEG and PNG."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(["blue", "green", "red"]):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            h, w = rng.integers(20, 64, 2)
            img = rng.integers(0, 90, (h, w, 3))
            img[:, :, 2 - c] += 150  # blue, green, red: the channel the name says
            ext = "jpg" if i % 2 else "png"
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(os.path.join(root, name, f"{i}.{ext}"))


def accuracy(text):
    """The best epoch's test accuracy (a few steps at a high rate wobble from one epoch to the next)."""
    found = [float(line.split("test accuracy")[1].split("%")[0]) for line in text.splitlines() if "test accuracy" in line]
    return max(found, default=-1.0)


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "colours")
    make_folder(os.path.join(data, "train"), 40, 1)
    make_folder(os.path.join(data, "val"), 10, 2)
    base = ["--model", "resnet8", "--devices", "host:2", "--batch", "24", "--lr", "0.02"]
    for extra in ([], ["--augment"]):
        rc, out, err = run(["train"] + base + ["--data", data, "--epochs", "3", "--eval"] + extra)
        check(f"resnet8 learns the colours {extra}", rc == 0 and accuracy(out + err) >= 90, (out + err)[-500:])
    check("the header names the folder", "image folder " + data in err and "120 training, 30 validation images in 3 classes"
          in err, err[:300])
    rc, out, err = run(["train", "--model", "mlp", "--devices", "host:2", "--batch", "16", "--data", data,
                        "--epochs", "2", "--eval", "--resize", "40"])
    check("a 1-channel model takes the images in gray", rc == 0 and "at 1x28x28" in err, err[-400:])
    rc, _, err = run(["memprof", "--model", "resnet8", "--devices", "host:2", "--batch", "16", "--data", data,
                      "--steps", "1"])
    check("memprof takes the folder", rc == 0, err[-300:])
    rc, out, err = run(["plan", "--model", "resnet8", "--devices", "meta:2", "--batch", "16", "--data", data])
    check("dp plan takes it (shapes only)", rc == 0, err[-300:])
    # Exact resume with the random crops, an uneven split and --accumulate: a sample's draws
    # follow its place in the epoch, so the resumed run sees the pixels the whole one saw.
    flags = ["train"] + base + ["--data", data, "--augment", "--steps", "6", "--accumulate", "2", "--split", "chunks:10,14"]
    ck, whole = os.path.join(tmp, "ck"), os.path.join(tmp, "whole.st")
    rc, _, err = run(flags + ["--checkpoint", ck, "--checkpoint-every", "3", "--save", whole])
    check("augmented, accumulated, uneven split: a checkpointed run", rc == 0, err[-300:])
    resumed = os.path.join(tmp, "resumed.st")
    rc, _, err = run(flags + ["--resume", os.path.join(ck, "step-00000003"), "--save", resumed])
    check("resumed at step 3: bitwise the same weights", rc == 0 and open(resumed, "rb").read() == open(whole, "rb").read(),
          err[-300:])
    trace, metrics = os.path.join(tmp, "t.json"), os.path.join(tmp, "m.jsonl")
    rc, _, err = run(["train"] + base + ["--data", data, "--steps", "5", "--trace", trace, "--metrics", metrics])
    events = json.load(open(trace))["traceEvents"] if rc == 0 else []
    check("the trace shows what the loop waited for the loader",
          any(e.get("name", "").startswith("waiting for data") and e.get("cat") == "load" for e in events), err[-300:])
    rows = [json.loads(line) for line in open(metrics)] if rc == 0 else []
    check("every step's metrics row has data_wait_ms",
          rows and all(r.get("data_wait_ms", -1) >= 0 for r in rows if "step" in r), rows[:1])
    rc, _, err = run(["train"] + base + ["--data", data, "--steps", "2", "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25"])
    check("--mean and --std given", rc == 0, err[-300:])
    expect("--mean of the wrong length", ["train"] + base + ["--data", data, "--mean", "0.5", "--std", "0.2"], 2,
           "1 values for images of 3 channels")
    expect("a crop scale out of range", ["train"] + base + ["--data", data, "--crop-scale", "0.5,2"], 2,
           "--crop-scale: expected LO,HI")

    bad = os.path.join(tmp, "bad")
    shutil.copytree(os.path.join(data, "train"), bad)
    os.makedirs(os.path.join(bad, "empty"))
    expect("an empty class folder is named", ["train"] + base + ["--data", bad, "--steps", "1"], 2,
           "empty: an empty class folder")
    os.rmdir(os.path.join(bad, "empty"))
    open(os.path.join(bad, "red", "notes.jpg"), "w").write("not an image")
    expect("a file that is no image is named", ["train"] + base + ["--data", bad, "--steps", "1"], 2,
           "notes.jpg: not a JPEG or PNG image")
    jpeg = open(os.path.join(bad, "red", "1.jpg"), "rb").read()
    open(os.path.join(bad, "red", "notes.jpg"), "wb").write(jpeg[:len(jpeg) // 3])
    expect("a truncated JPEG is named when its batch is made", ["train"] + base + ["--data", bad, "--epochs", "1"], 1,
           "notes.jpg: a corrupt or truncated JPEG")
    for threads in ("2", "3"):  # it aborted the process (exit 134) or crashed (139) with loader threads
        for attempt in range(3):
            expect(f"a truncated JPEG with {threads} loader threads, run {attempt}",
                   ["train"] + base + ["--data", bad, "--epochs", "1", "--loader-threads", threads], 1,
                   "notes.jpg: a corrupt or truncated JPEG")
    rc, _, err = run(["train"] + base + ["--data", bad, "--epochs", "1", "--skip-bad-images"])
    check("--skip-bad-images: the truncated JPEG is left out, named, and the run trains",
          rc == 0 and "1 image left out" in err and "notes.jpg: a corrupt or truncated JPEG" in err and
          "120 training images" in err and "1 bad image skipped" in err, err[-600:])
    many = os.path.join(tmp, "many")
    for c in range(11):
        os.makedirs(os.path.join(many, f"c{c:02d}"))
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(os.path.join(many, f"c{c:02d}", "a.png"))
    expect("more classes than the model's outputs", ["train"] + base + ["--data", many, "--batch", "4", "--steps", "1"],
           2, "11 classes, and model resnet8 has 10 outputs")
CLI.finish()
