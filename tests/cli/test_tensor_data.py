"""--data DIR with tensor files (.npy pairs, safetensors): dp train, eval and memprof take them
exactly; float32 samples are not normalised, augmented or sent as pixels; bad files name themselves.

usage: test_tensor_data.py DP_BINARY
"""
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli  # noqa: E402

CLI = Cli()
check, run, expect = CLI.check, CLI.run, CLI.expect


def save_safetensors(path, tensors):
    """safetensors' layout: a little-endian header length, the JSON header, the bytes."""
    header, data = {}, b""
    for name, array in tensors.items():
        dtype = {np.uint8: "U8", np.float32: "F32", np.int64: "I64", np.int32: "I32"}[array.dtype.type]
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def learnable(n, seed):
    """1x28x28 samples whose class is where a bright square sits: an mlp learns it in a few steps."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n).astype(np.int64)
    images = rng.normal(0, 0.1, (n, 1, 28, 28)).astype(np.float32)
    for i, c in enumerate(labels):
        images[i, 0, 2 + 2 * c:6 + 2 * c, 4:24] += 2.0
    return images, labels


with tempfile.TemporaryDirectory() as tmp:
    npy, st = os.path.join(tmp, "npy"), os.path.join(tmp, "st")
    os.makedirs(npy), os.makedirs(st)
    images, labels = learnable(256, 1)
    val_images, val_labels = learnable(64, 2)
    np.save(os.path.join(npy, "train_images.npy"), images)
    np.save(os.path.join(npy, "train_labels.npy"), labels)
    np.save(os.path.join(npy, "val_images.npy"), val_images)
    np.save(os.path.join(npy, "val_labels.npy"), val_labels)
    pixels = np.clip(images * 60 + 40, 0, 255).astype(np.uint8)
    save_safetensors(os.path.join(st, "train.safetensors"), {"images": pixels, "labels": labels.astype(np.int32)})

    base = ["--model", "mlp", "--devices", "host:2", "--batch", "32", "--lr", "0.1"]
    weights = os.path.join(tmp, "w.safetensors")
    rc, out, err = run(["train"] + base + ["--data", npy, "--epochs", "3", "--eval", "--save", weights])
    check("float32 .npy: trains", rc == 0, err[-400:])
    check("the header names the tensor files", "tensor files in " + npy in err and "float32" in err, err[:400])
    accuracy = [line for line in (out + err).splitlines() if "accuracy" in line]
    check("it learns the squares (accuracy above 90%)",
          bool(accuracy) and float(accuracy[-1].split("accuracy")[1].split("%")[0].split()[-1]) > 90, accuracy)
    js = os.path.join(tmp, "eval.json")
    rc, _, err = run(["eval", "--model", "mlp", "--devices", "host:2", "--data", npy, "--weights", weights,
                      "--json", js])
    check("eval takes the same files", rc == 0 and json.load(open(js))["test_targets"] == 64, err[-300:])

    rc, _, err = run(["train"] + base + ["--data", st, "--steps", "3", "--normalise-on", "device"])
    check("uint8 safetensors without a val file: trains, pixels normalised on the devices", rc == 0, err[-400:])
    expect("no val file: --eval says there are no test samples",
           ["train"] + base + ["--data", st, "--steps", "1", "--eval"], 1, "no test samples")
    expect("float32 samples are not augmented", ["train"] + base + ["--data", npy, "--steps", "1", "--augment"], 2,
           "taken as they are")
    expect("float32 samples have no pixels for --normalise-on device",
           ["train"] + base + ["--data", npy, "--steps", "1", "--normalise-on", "device"], 2, "no pixels to normalise")
    expect("--mean for float32 samples", ["train"] + base + ["--data", npy, "--mean", "0.5", "--std", "0.2"], 2,
           "taken as they are")
    expect("a sample shape the model does not take names both",
           ["train", "--model", "resnet8", "--devices", "host:2", "--batch", "8", "--data", npy, "--steps", "1"], 2,
           "has [1, 28, 28]")
    np.save(os.path.join(npy, "train_labels.npy"), -labels)
    expect("a negative label names the file and the sample",
           ["train"] + base + ["--data", npy, "--steps", "1"], 1, "train_labels.npy: label -")
    rc, _, err = run(["memprof", "--model", "mlp", "--devices", "host:2", "--batch", "32", "--data", st,
                      "--steps", "1"])
    check("memprof takes them", rc == 0, err[-300:])
CLI.finish()
