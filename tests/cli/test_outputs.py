"""Outputs that never destroy what the user has (each check fails without its fix):
symlinks written through to their target, special files refused, modes kept, outputs that are
the same file as an input or as another output refused before anything runs, empty data sets
named, no temporary left behind by a signal, per-device trace counters, and the smaller edges
(speed bounds, byte counts, seeds, empty paths, --batch larger than the data, module.-prefixed
checkpoints, a progress bar that fits the terminal, results on stdout).

usage: test_outputs.py DP_BINARY
"""
import fcntl
import json
import os
import pty
import re
import select
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import termios
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli, write_mnist_like  # noqa: E402

CLI = Cli()
DP, check, run, expect = CLI.dp, CLI.check, CLI.run, CLI.expect


def write_idx(d, prefix, n):
    write_mnist_like(d, prefix, n)


def mnist_dir(base, name, train=40, test=10):
    d = os.path.join(base, name)
    os.makedirs(d)
    write_idx(d, "train", train)
    write_idx(d, "t10k", test)
    return d


def snapshot(path):
    st = os.lstat(path)
    data = open(path, "rb").read() if stat.S_ISREG(st.st_mode) else None
    return st.st_mode, data


with tempfile.TemporaryDirectory() as tmp:
    data = mnist_dir(tmp, "data")
    small = ["train", "--data", data, "--devices", "host:2", "--steps", "2", "--batch", "8", "--model", "mlp"]

    # ---- symlinks, modes, special files
    target = os.path.join(tmp, "weights.safetensors")
    open(target, "wb").write(b"old")
    os.chmod(target, 0o600)
    link = os.path.join(tmp, "link.safetensors")
    os.symlink("weights.safetensors", link)
    rc, out, err = run(small + ["--save", link])
    check("save through a symlink", rc == 0, err)
    check("the symlink stays a symlink", os.path.islink(link) and os.readlink(link) == "weights.safetensors")
    check("its target is written", open(target, "rb").read()[:8] != b"old" and os.path.getsize(target) > 100)
    check("the target keeps its mode", stat.S_IMODE(os.stat(target).st_mode) == 0o600, oct(os.stat(target).st_mode))
    dangling = os.path.join(tmp, "dangling.jsonl")
    os.symlink("made-by-dp.jsonl", dangling)
    rc, out, err = run(small + ["--metrics", dangling])
    check("a dangling symlink's target is created", rc == 0 and os.path.islink(dangling) and
          os.path.getsize(os.path.join(tmp, "made-by-dp.jsonl")) > 0, err)
    metrics = os.path.join(tmp, "keep-mode.jsonl")
    open(metrics, "w").write("old\n")
    os.chmod(metrics, 0o640)
    rc, out, err = run(small + ["--metrics", metrics])
    check("metrics keeps its mode", rc == 0 and stat.S_IMODE(os.stat(metrics).st_mode) == 0o640)
    rc, out, err = run(small + ["--metrics", metrics, "--lr", "0.05"])
    check("the float32 learning rate is written as its shortest decimal", rc == 0 and
          '"lr":0.05,' in open(metrics).read(), open(metrics).read()[:300])

    # A private null device (never the system's /dev/null: a regression would replace it).
    null = os.path.join(tmp, "null")
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        null = None
    if null:
        for flag in ("--save", "--metrics"):
            expect(f"{flag} on a device refused", small + [flag, null], 2, "is a character device")
        check("the device is still a device", stat.S_ISCHR(os.lstat(null).st_mode))
        expect("memprof --json on a device refused", ["memprof", "--model", "mlp", "--json", null], 2,
               "is a character device")
    fifo = os.path.join(tmp, "pipe")
    os.mkfifo(fifo)
    expect("a named pipe refused", small + ["--save", fifo], 2, "is a named pipe")
    check("the pipe is still a pipe", stat.S_ISFIFO(os.lstat(fifo).st_mode))
    expect("demo --trace on a pipe refused", ["demo", "--trace", fifo], 2, "is a named pipe")

    # ---- the same file twice
    init = os.path.join(tmp, "init.safetensors")
    rc, _, err = run(small + ["--save", init])
    before = snapshot(init)
    expect("--metrics is --init", small + ["--init", init, "--metrics", init], 2, "same file as --init")
    check("--init untouched", snapshot(init) == before)
    hard = os.path.join(tmp, "hard.safetensors")
    os.link(init, hard)
    expect("--save is a hard link to --init", small + ["--init", init, "--save", hard], 2, "same file as --init")
    check("--init untouched (hard link)", snapshot(init) == before)
    data_file = os.path.join(data, "train-labels-idx1-ubyte.gz")
    data_before = snapshot(data_file)
    expect("--metrics is a --data file", small + ["--metrics", data_file], 2, "--data file train-labels-idx1-ubyte.gz")
    via = os.path.join(tmp, "via")
    os.symlink(data_file, via)
    expect("--save is a --data file via a symlink", small + ["--save", via], 2, "--data file")
    check("--data untouched", snapshot(data_file) == data_before)
    both = os.path.join(tmp, "both")
    expect("--save and --metrics the same", small + ["--save", both, "--metrics", both], 2,
           "--save and --metrics name the same file")
    expect("memprof --json and --svg the same", ["memprof", "--model", "mlp", "--json", both, "--svg",
                                                 os.path.join(tmp, ".", "both")], 2, "name the same file")
    check("nothing written for refused runs", not os.path.exists(both))

    # ---- the model file and every other input, for every command and output flag
    net = os.path.join(tmp, "net.json")
    with open(net, "w") as f:
        json.dump({"format": "dp-model", "version": 1, "name": "Net", "source": "net.py:Net",
                   "input": {"name": "x", "kind": "image", "shape": [1, 2, 2], "dtype": "float32"},
                   "nodes": [{"name": "flatten", "op": "flatten", "module": "", "inputs": ["x"],
                              "attrs": {"start_dim": 1, "end_dim": -1}, "shape": [4], "where": ""},
                             {"name": "l", "op": "linear", "module": "l", "inputs": ["flatten"],
                              "attrs": {"in_features": 4, "out_features": 2, "bias": True}, "shape": [2], "where": ""}],
                   "output": "l", "state": [{"name": "l.weight", "shape": [2, 4], "kind": "parameter"},
                                            {"name": "l.bias", "shape": [2], "kind": "parameter"}],
                   "loss": {"kind": "cross_entropy"}}, f)
    net_before = snapshot(net)
    on_net = [("plan", ["--devices", "meta:2", "--batch", "8"], ["--html", "--json", "--svg", "--trace"]),
              ("memprof", ["--devices", "host:2", "--batch", "8"], ["--html", "--json", "--svg", "--trace"]),
              ("demo", ["--devices", "host:2", "--batch", "8"], ["--html", "--json", "--trace"]),
              ("train", ["--devices", "host:2", "--batch", "8", "--steps", "1", "--eval"],
               ["--save", "--metrics", "--trace", "--save-best"])]
    for command, args, flags in on_net:
        for flag in flags:
            expect(f"{command} {flag} onto the model file", [command, "--model", net] + args + [flag, net], 2,
                   f"{flag} {net} is the same file as --model")
    trained = os.path.join(tmp, "net.safetensors")
    rc, _, err = run(["train", "--model", net, "--devices", "host:1", "--batch", "4", "--steps", "1", "--save", trained])
    check("a model file trains (for eval's check below)", rc == 0, err)
    expect("eval --json onto the model file", ["eval", "--model", net, "--weights", trained, "--json", net], 2,
           f"--json {net} is the same file as --model")
    check("the model file untouched by every refused output", snapshot(net) == net_before)
    # a file anywhere below --data's folder (an image folder's class, say), a checkpoint's files
    deep = os.path.join(data, "more")
    os.makedirs(deep)
    inner = os.path.join(deep, "notes.txt")
    open(inner, "w").write("mine\n")
    expect("--metrics onto a file below --data", small + ["--metrics", inner], 2,
           f"is {os.path.join('more', 'notes.txt')} in --data {data}: writing it would destroy an input")
    check("the file below --data untouched", open(inner).read() == "mine\n")
    os.remove(inner)
    os.rmdir(deep)
    ck = os.path.join(tmp, "ck")
    rc, _, err = run(small + ["--checkpoint", ck])
    step = os.path.join(ck, sorted(os.listdir(ck))[-1]) if os.path.isdir(ck) else ck
    saved = os.path.join(step, "model.safetensors")
    saved_before = snapshot(saved) if os.path.exists(saved) else None
    expect("train --save onto the checkpoint it resumes",
           ["train", "--data", data, "--devices", "host:2", "--steps", "3", "--batch", "8", "--model", "mlp", "--resume",
            step, "--save", saved], 2, f"is model.safetensors in --resume {step}")
    expect("eval --json onto a file of the checkpoint it reads", ["eval", "--data", data, "--weights", step, "--json",
                                                                 saved], 2, f"in --weights {step}")
    check("the checkpoint untouched", saved_before is not None and snapshot(saved) == saved_before)

    # ---- links inside an input folder: an image folder built of symlinks (the usual way to make an
    # ImageFolder without copying), a token folder, tensor files; every output flag of every command
    # onto a link (and onto another link or a hard link to the same file) is refused, the files kept.
    import numpy as np
    from PIL import Image
    src = os.path.join(tmp, "photos")
    linked = os.path.join(tmp, "linked")
    for cls in ("a", "b"):
        os.makedirs(os.path.join(src, cls))
        for split in ("train", "val"):
            os.makedirs(os.path.join(linked, split, cls))
        for i in range(3):
            f = os.path.join(src, cls, f"{i}.png")
            Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(f)
            for split in ("train", "val"):
                os.symlink(f, os.path.join(linked, split, cls, f"{i}.png"))
    photo = os.path.join(src, "a", "2.png")
    photo_link = os.path.join(linked, "train", "a", "2.png")
    via_outside = os.path.join(tmp, "outside-link.png")
    os.symlink(photo, via_outside)
    hard_photo = os.path.join(tmp, "hard-photo.png")
    os.link(photo, hard_photo)
    tokens = os.path.join(tmp, "tokens-src")
    os.makedirs(tokens)
    for name in ("train.bin", "val.bin"):
        np.arange(200, dtype=np.uint16).tofile(os.path.join(tokens, name))
    token_dir = os.path.join(tmp, "tokens")
    os.makedirs(token_dir)
    for name in ("train.bin", "val.bin"):
        os.symlink(os.path.join(tokens, name), os.path.join(token_dir, name))
    token_link = os.path.join(token_dir, "train.bin")
    tensors = os.path.join(tmp, "tensors-src")
    os.makedirs(tensors)
    np.save(os.path.join(tensors, "train_images.npy"), np.zeros((8, 1, 4, 4), np.float32))
    np.save(os.path.join(tensors, "train_labels.npy"), np.arange(8, dtype=np.int64) % 2)
    tensor_dir = os.path.join(tmp, "tensors")
    os.makedirs(tensor_dir)
    for name in ("train_images.npy", "train_labels.npy"):
        os.symlink(os.path.join(tensors, name), os.path.join(tensor_dir, name))
    tensor_link = os.path.join(tensor_dir, "train_images.npy")
    kept = {f: snapshot(f) for f in (photo, os.path.join(tokens, "train.bin"), os.path.join(tensors, "train_images.npy"))}
    image_runs = [("plan", ["--model", "mlp", "--devices", "meta:2", "--batch", "8"], ["--html", "--json", "--svg", "--trace"]),
                  ("memprof", ["--model", "mlp", "--devices", "host:2", "--batch", "8"],
                   ["--html", "--json", "--svg", "--trace"]),
                  ("demo", ["--model", "mlp", "--devices", "host:2", "--batch", "8"], ["--html", "--json", "--trace"]),
                  ("train", ["--model", "mlp", "--devices", "host:2", "--batch", "8", "--steps", "1", "--eval"],
                   ["--save", "--metrics", "--trace", "--save-best"]),
                  ("eval", ["--model", "mlp", "--devices", "host:2", "--batch", "8", "--weights", init], ["--json"])]
    for command, args, flags in image_runs:
        for flag in flags:
            for target, why in ((photo_link, "the link itself"), (via_outside, "another link to its file"),
                                (hard_photo, "a hard link to its file")):
                expect(f"{command} {flag} onto {why} in an image folder", [command, "--data", linked] + args +
                       [flag, target], 2, "writing it would destroy an input")
    expect("train --save onto a token file's link", ["train", "--model", "gpt", "--data", token_dir, "--devices", "host:1",
                                                     "--steps", "1", "--save", token_link], 2,
           "is the same file as --data file train.bin: writing it would destroy an input")
    expect("memprof --json onto a tensor file's link", ["memprof", "--model", "mlp", "--data", tensor_dir, "--devices",
                                                        "host:1", "--batch", "4", "--json", tensor_link], 2,
           "is the same file as --data file train_images.npy: writing it would destroy an input")
    check("every linked input untouched", all(snapshot(f) == before_f for f, before_f in kept.items()) and
          os.path.islink(photo_link) and os.path.islink(token_link) and os.path.islink(tensor_link))
    new_in_folder = os.path.join(linked, "report.json")
    rc, _, err = run(["plan", "--model", "mlp", "--devices", "meta:2", "--batch", "4", "--data", linked, "--json",
                      new_in_folder])
    check("a new file inside the folder is still allowed", rc == 0 and os.path.exists(new_in_folder), err[-300:])
    if os.path.exists(new_in_folder):
        os.remove(new_in_folder)

    # ---- empty data sets
    empty = mnist_dir(tmp, "empty", train=0, test=10)
    expect("0 training samples", ["train", "--data", empty, "--model", "mlp", "--save", init], 1,
           "train-images-idx3-ubyte.gz: no training samples")
    check("--save untouched by the empty run", snapshot(init) == before)
    notest = mnist_dir(tmp, "notest", train=40, test=0)
    expect("0 test samples with --eval", small[:2] + [notest] + small[3:] + ["--eval"], 1,
           "t10k-images-idx3-ubyte.gz: no test samples")
    expect("0 test samples with --eval-every", small[:2] + [notest] + small[3:] + ["--eval-every", "2"], 1,
           "t10k-images-idx3-ubyte.gz: no test samples")
    rc, _, err = run(small[:2] + [notest] + small[3:])
    check("0 test samples without --eval is fine", rc == 0, err)

    # ---- smaller edges
    expect("--batch larger than the data", small + ["--batch", "41"], 2, "larger than the training set (40 samples")
    expect("--seed beyond 64 bits", small + ["--seed", "18446744073709551616"], 2, "--seed")
    rc, _, err = run(small + ["--seed", "18446744073709551615"])
    check("--seed at 2^64-1 is fine", rc == 0, err)
    expect("--device-memory 1.5", small + ["--device-memory", "1.5"], 2, "did you mean 1.5GiB")
    for flag in ("--data", "--save", "--metrics", "--init"):
        expect(f"{flag} empty", small + [flag, ""], 2, "empty path")
    expect("memprof --svg empty", ["memprof", "--svg", ""], 2, "empty path")

    # A state dict saved from nn.DataParallel: "module." before every name.
    raw = open(init, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    wrapped = {(k if k == "__metadata__" else "module." + k): v for k, v in header.items()}
    h = json.dumps(wrapped).encode()
    h += b" " * (-(len(h) + 8) % 8)
    module_file = os.path.join(tmp, "module.safetensors")
    open(module_file, "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
    rc, _, err = run(small + ["--init", module_file])
    check("a module.-prefixed checkpoint loads", rc == 0 and "'module.' prefix" in err, err)

    rc, out, err = run(small + ["--eval"])
    check("test accuracy on stdout with the summary", rc == 0 and "test accuracy" in out and "test accuracy" not in err,
          out + err)

    # ---- trace: one memory counter track per device
    trace = os.path.join(tmp, "t.json")
    rc, _, err = run(["memprof", "--model", "mlp", "--devices", "host:3", "--trace", trace])
    names = {e["name"] for e in json.load(open(trace))["traceEvents"] if e["ph"] == "C"}
    check("a counter track per device", {"d0 memory in use", "d1 memory in use", "d2 memory in use"} <= names, names)

    # ---- memprof keeps a bounded timeline
    js = os.path.join(tmp, "m.json")
    rc, _, err = run(["memprof", "--model", "tiny", "--batch", "8", "--steps", "40", "--json", js])
    r = json.load(open(js))
    check("memprof timeline capped", rc == 0 and r["steps"] == 40 and r["timeline_steps"] == 16 and
          len(r["timeline"]) == 16 * 9, (r.get("steps"), r.get("timeline_steps"), len(r.get("timeline", []))))

    # ---- a signal while writing leaves no temporary behind
    big = ["train", "--model", "resnet18", "--devices", "host:1", "--batch", "2", "--steps", "1",
           "--generated-size", "4"]
    outdir = os.path.join(tmp, "sig")
    os.makedirs(outdir)
    leftovers, interrupted = [], 0
    for attempt in range(8):
        out_file = os.path.join(outdir, f"w{attempt}.safetensors")
        p = subprocess.Popen([DP] + big + ["--save", out_file], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        # Wait for the temporary to appear, then interrupt mid-write.
        while p.poll() is None and time.time() < deadline:
            if any(".tmp." in f and not f.endswith(".probe") for f in os.listdir(outdir)):
                p.send_signal(signal.SIGINT if attempt % 2 else signal.SIGTERM)
                interrupted += 1
                break
            time.sleep(0.0005)
        p.wait(timeout=120)
        leftovers += [f for f in os.listdir(outdir) if ".tmp." in f]
    check("signals arrived while a temporary existed", interrupted >= 1, interrupted)
    check("no temporary left behind", leftovers == [], leftovers)

    # ---- the progress bar fits a narrow terminal
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
    p = subprocess.Popen([DP] + small + ["--steps", "5"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave)
    os.close(slave)
    screen = b""
    while True:
        r, _, _ = select.select([master], [], [], 30)
        if not r:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    p.wait(timeout=60)
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", screen.decode(errors="replace"))
    bars = [seg for line in text.split("\n") for seg in line.split("\r") if "epoch" in seg and "/5" in seg]
    check("the bar was drawn", len(bars) > 0, repr(text))
    check("every redraw fits 40 columns", all(len(b) <= 39 for b in bars), [len(b) for b in bars])

CLI.finish()
