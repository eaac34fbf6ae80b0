"""Model files (tools/export_model.py, dp --model FILE.json): the exporter's output and refusals,
the built-in resnet8's PyTorch twin exported and trained bit for bit as --model resnet8 (every
step shape), the commands on a file (train, eval, memprof, demo, plan, checkpoints; memprof, plan and demo on
torchvision's resnet18, resnet50, mobilenet_v2, squeezenet1_1, densenet121 and vgg11), data that
follows the file's input shape, and every bad file dp refuses with exit 2 naming what is wrong.

usage: test_model_file.py DP_BINARY   (exit 77 = skipped: no torch)
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from checks import Cli, mnist_like_dir  # noqa: E402

CLI = Cli()
check, run, expect = CLI.check, CLI.run, CLI.expect
EXPORT = os.path.join(HERE, "..", "..", "tools", "export_model.py")
TORCH_TESTS = os.path.join(HERE, "..", "torch")


def export(args):
    p = subprocess.run(["/usr/bin/python3", EXPORT] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def read(path):
    """A safetensors file's tensors: its header less __metadata__ (which names the model each run
    was given) and its data, byte for byte."""
    import json
    import struct
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return json.dumps(header, sort_keys=True).encode() + data[8 + n:]


with tempfile.TemporaryDirectory() as tmp:
    def at(name):
        return os.path.join(tmp, name)

    # ---- the exporter
    # Run by a Python without PyTorch (-S: no site packages), it says so in one line, no traceback.
    p = subprocess.run(["/usr/bin/python3", "-S", EXPORT, "x.py:Net", "--input", "3x8x8", "--out", at("none.json")],
                       capture_output=True, text=True)
    check("the exporter without PyTorch says what to install", p.returncode == 2 and "PyTorch is not installed" in
          p.stderr and "apt-get install python3-torch" in p.stderr and "Traceback" not in p.stderr, p.stderr)
    with open(at("twin.py"), "w") as f:
        f.write(f"import sys\nsys.path.insert(0, {TORCH_TESTS!r})\nimport reference\n\n"
                "def resnet8():\n    return reference.make_model('resnet8')\n")
    rc, out, err = export([at("twin.py") + ":resnet8", "--input", "3x32x32", "--out", at("r8.json"),
                           "--weights", at("r8.safetensors")])
    check("the resnet8 twin exports", rc == 0 and os.path.exists(at("r8.json")), err)
    doc = json.load(open(at("r8.json")))
    check("the file names its format and version", doc["format"] == "dp-model" and doc["version"] == 1, str(doc)[:200])
    check("the input is one sample's shape", doc["input"] == {"name": "x", "kind": "image", "shape": [3, 32, 32],
                                                              "dtype": "float32"}, str(doc["input"]))
    names = [n["name"] for n in doc["nodes"]]
    check("nodes are unique and in order, each reading earlier nodes",
          len(set(names)) == len(names) and all(i in names[:k] or i == "x" for k, n in enumerate(doc["nodes"])
                                                for i in n["inputs"]), str(names))
    first = doc["nodes"][0]
    check("a node records its module path, attributes, output shape and source line",
          first["module"] == "conv1" and first["attrs"]["out_channels"] == 16 and first["shape"] == [16, 32, 32]
          and first["where"].startswith("reference.py:"), str(first))
    check("the state is the module's state_dict, in order",
          [s["name"] for s in doc["state"]][:3] == ["conv1.weight", "bn1.weight", "bn1.bias"]
          and any(s["name"] == "bn1.num_batches_tracked" and s["kind"] == "buffer" for s in doc["state"]),
          str(doc["state"][:6]))

    with open(at("bad.py"), "w") as f:
        f.write("import torch.nn as nn\n\nclass Sines(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.fc = nn.Linear(4, 2)\n\n    def forward(self, x):\n        return self.fc(x.sin())\n\n"
                "def three():\n    return 3\n")
    rc, out, err = export([at("bad.py") + ":Sines", "--input", "4", "--out", at("s.json")])
    check("an op dp does not run is refused naming it, its node and the source line",
          rc == 2 and "Tensor.sin" in err and "bad.py:9" in err and not os.path.exists(at("s.json")), err)
    with open(at("untraced.py"), "w") as f:
        f.write("import torch\nimport torch.nn as nn\n\nclass Chunky(nn.Module):\n    def __init__(self):\n"
                "        super().__init__()\n        self.fc = nn.Linear(12, 12)\n\n    def forward(self, x):\n"
                "        q, k, v = self.fc(x).chunk(3, -1)\n        return q + k + v\n\n"
                "class Shapes(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.c = nn.Conv2d(3, 4, 3)\n\n    def forward(self, x):\n        b, c, h, w = x.shape\n"
                "        return self.c(x).view(b, -1)\n\n"
                "class Mixed(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.c = nn.Conv2d(3, 4, 3)\n\n    def forward(self, x):\n        b, c, h, w = x.shape\n"
                "        return self.c(x).view(b * 4, 36)\n\n"
                "class Many(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.c = nn.Conv2d(3, 4, 3)\n        self.fc = nn.Linear(4, 2)\n\n    def forward(self, x):\n"
                "        y = self.c(x).permute(0, 2, 3, 1)\n"
                "        y = torch.sub(y, y).unsqueeze(1).sin()\n"
                "        return self.fc(y.mean((1, 2, 3)).view(-1, 4))\n")
    rc, out, err = export([at("untraced.py") + ":Chunky", "--input", "12", "--out", at("n.json")])
    parts = [n for n in json.load(open(at("n.json")))["nodes"] if n["op"] == "narrow"] if rc == 0 else []
    check("an unpacked chunk traces (no stray IndexError): its parts are narrows of 4 columns each",
          rc == 0 and [(p["attrs"]["start"], p["attrs"]["length"]) for p in parts] == [(0, 4), (4, 4), (8, 4)], err)
    os.remove(at("n.json"))
    rc, out, err = export([at("untraced.py") + ":Shapes", "--input", "3x8x8", "--out", at("shapes.json")])
    check("sizes unpacked from x.shape (b, c, h, w = x.shape) are a view's arguments: it exports",
          rc == 0 and json.load(open(at("shapes.json")))["nodes"][-1]["op"] == "reshape", err)
    rc, out, err = export([at("untraced.py") + ":Mixed", "--input", "3x8x8", "--out", at("n.json")])
    check("a view that moves the batch into another dimension is refused naming it and both batches' shapes",
          rc == 2 and "untraced.py:" in err and "first dimension is not the batch's (a batch of 2 gives [8, 36], "
          "of 3 [12, 36])" in err, err)
    rc, out, err = export([at("untraced.py") + ":Many", "--input", "3x8x8", "--out", at("n.json")])
    check("every op dp does not run, in one refusal, with a hint where there is one",
          rc == 2 and "2 ops dp does not run" in err and "Tensor.sin" in err and "torch.sub" in err
          and "instead: x + (-1) * y" in err and "unsqueeze" not in err, err)
    with open(at("odd_cpb.py"), "w") as f:
        f.write("import torch.nn as nn\nfrom torchvision.models.swin_transformer import ShiftedWindowAttentionV2\n\n"
                "class OddCpb(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.attn = ShiftedWindowAttentionV2(8, [2, 2], [0, 0], 2)\n"
                "        self.attn.cpb_mlp[1] = nn.GELU()\n        self.fc = nn.Linear(8, 2)\n\n"
                "    def forward(self, x):\n        return self.fc(self.attn(x).mean((1, 2)))\n")
    with open(at("reflect.py"), "w") as f:
        f.write("import torch.nn as nn\nimport torch.nn.functional as F\n\nclass Reflect(nn.Module):\n"
                "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(6, 2)\n\n"
                "    def forward(self, x):\n        return self.fc(F.pad(x, (1, 1, 1, 1), mode='reflect'))\n")
    rc, out, err = export([at("reflect.py") + ":Reflect", "--input", "3x4x4", "--out", at("n.json")])
    check("F.pad other than with zeros is refused, naming the mode and the line",
          rc == 2 and "mode 'reflect'" in err and "dp pads with zeros only" in err and "reflect.py:10" in err, err)
    rc, out, err = export([at("odd_cpb.py") + ":OddCpb", "--input", "4x4x8", "--out", at("n.json")])
    check("a Swin V2 attention whose cpb_mlp is not torchvision's is refused, naming it",
          rc == 2 and "its cpb_mlp is not torchvision's" in err and "GELU" in err, err)
    rc, out, err = export([at("untraced.py") + ":Shapes", "--input", "1x8x8", "--out", at("n.json")])
    check("an --input the model cannot take: one message naming the shape and the line, no traceback",
          rc == 2 and "--input 1x8x8: the model does not take samples of this shape" in err
          and "expected input[2, 1, 8, 8] to have 3 channels" in err and "Traceback" not in err
          and len(err.strip().splitlines()) == 1, err)
    rc, out, err = export([at("untraced.py") + ":Shapes", "--input", "3x32", "--out", at("n.json")])
    check("--input 3x32 (neither CxHxW nor a vector) is refused", rc == 2 and "--input 3x32: give one sample's shape"
          in err, err)
    rc, out, err = export(["no_such_package.models:Net", "--input", "3x32x32", "--out", at("n.json")])
    check("a spec that imports nothing is refused", rc == 2 and "cannot import 'no_such_package.models'" in err, err)
    rc, out, err = export([at("bad.py") + ":Missing", "--input", "4", "--out", at("n.json")])
    check("a spec naming nothing in its module is refused", rc == 2 and "has no 'Missing'" in err, err)
    rc, out, err = export([at("bad.py") + ":three", "--input", "4", "--out", at("n.json")])
    check("a spec returning no module is refused", rc == 2 and "returned int, not an nn.Module" in err, err)
    rc, out, err = export([at("twin.py") + ":resnet8", "--input", "3by32", "--out", at("n.json")])
    check("a bad --input is refused", rc == 2 and "--input 3by32" in err, err)
    rc, out, err = export([at("twin.py") + ":resnet8", "--input", "3x32x32", "--out", at("n.txt")])
    check("an --out not ending in .json is refused", rc == 2 and ".json" in err, err)
    before = open(at("r8.json"), "rb").read()
    rc, out, err = export([at("twin.py") + ":resnet8", "--input", "3x32x32", "--out", at("r8.json"), "--weights",
                           at("r8.json")])
    check("--out and --weights the same file: refused, the file untouched",
          rc == 2 and "--out and --weights name the same file" in err and open(at("r8.json"), "rb").read() == before, err)
    spec_before = open(at("twin.py"), "rb").read()
    rc, out, err = export([at("twin.py") + ":resnet8", "--input", "3x32x32", "--out", at("n.json"), "--weights",
                           at("twin.py")])
    check("--weights onto the spec's own .py file: refused, the spec untouched",
          rc == 2 and "same file as the spec's file" in err and open(at("twin.py"), "rb").read() == spec_before
          and not os.path.exists(at("n.json")), err)

    # ---- the twin trains as the built-in, bit for bit, under every step shape
    for devices, split, sync in (("host:2", "even", "reduce"), ("host:3", "chunks:5,2,4", "reduce"),
                                 ("host:3", "even", "allreduce"), ("host:2", "even", "zero2"),
                                 ("host:2", "even", "zero3")):
        got = {}
        for model in ("resnet8", at("r8.json")):
            out_file = at(f"w-{len(got)}.safetensors")
            rc, out, err = run(["train", "--model", model, "--devices", devices, "--split", split, "--sync", sync,
                                "--batch", "11", "--steps", "3", "--init", at("r8.safetensors"), "--save", out_file])
            got[model] = read(out_file) if rc == 0 else err
        check(f"the exported twin trains as --model resnet8 bit for bit ({devices} {split} --sync {sync})",
              got["resnet8"] == got[at("r8.json")] and isinstance(got["resnet8"], bytes), str(got)[:300])
    rc, out, err = run(["train", "--model", at("r8.json"), "--devices", "host:2", "--batch", "8", "--steps", "2"])
    check("train's header names the model file", rc == 0 and "r8.json" in out + err, out + err)

    # ---- the commands on a file
    rc, out, err = run(["memprof", "--model", at("r8.json"), "--devices", "host:3", "--batch", "12"])
    check("memprof runs a model file", rc == 0 and "gpu0 excess" in out, out + err)
    rc, out, err = run(["demo", "--model", at("r8.json")])
    check("demo narrates a model file's step", rc == 0 and "scatter" in out and "r8.json" in out, out[:300] + err)
    rc, out, err = run(["plan", "--model", at("r8.json"), "--devices", "meta:4", "--batch", "64", "--compare"])
    check("plan compares strategies for a model file", rc == 0 and "ZeRO-3" in out, out[-500:] + err)
    plan = at("plan.json")
    mem = at("mem.json")
    run(["plan", "--model", at("r8.json"), "--devices", "meta:3", "--batch", "12", "--json", plan])
    run(["memprof", "--model", at("r8.json"), "--devices", "host:3", "--batch", "12", "--json", mem])
    if os.path.exists(plan) and os.path.exists(mem):
        p, m = json.load(open(plan)), json.load(open(mem))
        check("plan on meta:3 equals memprof on host:3 for a model file, device by device",
              [{k: v for k, v in d.items() if k != "name"} for d in p["devices"]]
              == [{k: v for k, v in d.items() if k != "name"} for d in m["devices"]], str(p["devices"])[:300])
    else:
        check("plan and memprof write their reports for a model file", False)
    ck = at("ck")
    rc, out, err = run(["train", "--model", at("r8.json"), "--devices", "host:2", "--batch", "8", "--steps", "4",
                        "--checkpoint", ck, "--checkpoint-every", "2", "--save", at("straight.safetensors"),
                        "--no-shuffle"])
    rc2, out2, err2 = run(["train", "--model", at("r8.json"), "--devices", "host:2", "--batch", "8", "--steps", "4",
                           "--resume", os.path.join(ck, "step-00000002"), "--save", at("resumed.safetensors"),
                           "--no-shuffle"])
    check("a model file's checkpoint resumes bit for bit", rc == 0 and rc2 == 0 and
          read(at("straight.safetensors")) == read(at("resumed.safetensors")), err + err2)
    rc, out, err = run(["eval", "--model", at("r8.json"), "--weights", at("straight.safetensors"), "--devices",
                        "host:2"])
    check("eval runs a model file's weights", rc == 0 and "accuracy" in out.lower(), out + err)

    # ---- a model file is what it holds, not the path it was typed as: from another directory, by
    # another path, the same model; another file, refused naming both
    elsewhere = at("elsewhere")
    os.makedirs(elsewhere)
    rel_net = os.path.relpath(at("r8.json"), elsewhere)

    def run_in(folder, args):
        p = subprocess.run([CLI.dp] + args, capture_output=True, text=True, cwd=folder, timeout=300)
        return p.returncode, p.stdout, p.stderr
    rc, out, err = run_in(tmp, ["train", "--model", "r8.json", "--devices", "host:2", "--batch", "8", "--steps", "2",
                                "--save", "here.safetensors", "--checkpoint", "ck-here", "--no-shuffle"])
    check("a run in the model file's folder, by its bare name", rc == 0, err)
    rc, out, err = run_in(elsewhere, ["eval", "--weights", at("here.safetensors"), "--devices", "host:2"])
    check("eval from another directory finds the model from the weights alone", rc == 0 and "accuracy" in out.lower(),
          out + err)
    rc, out, err = run_in(elsewhere, ["eval", "--weights", at("here.safetensors"), "--model", rel_net, "--devices",
                                      "host:2"])
    check("eval takes another path to the same model file", rc == 0 and "accuracy" in out.lower(), out + err)
    other = at("other.json")
    doc = json.load(open(at("r8.json")))
    doc["name"] = "another"  # the same graph, another file's content
    json.dump(doc, open(other, "w"))
    rc, out, err = run_in(elsewhere, ["eval", "--weights", at("here.safetensors"), "--model", other, "--devices",
                                      "host:2"])
    check("eval refuses another model file, naming both", rc == 2 and "holds the weights of the model file" in err
          and "r8.json" in err, err)
    step = os.path.join(tmp, "ck-here", "step-00000002")
    rc, out, err = run_in(elsewhere, ["eval", "--weights", os.path.join(step, "model.safetensors"), "--devices",
                                      "host:2"])
    check("eval of a checkpoint's model.safetensors reads the state.json beside it", rc == 0
          and "accuracy" in out.lower(), out + err)
    rc, out, err = run_in(elsewhere, ["train", "--model", rel_net, "--devices", "host:2", "--batch", "8", "--steps",
                                      "3", "--resume", step, "--no-shuffle"])
    check("train --resume from another directory, by another path to the model file", rc == 0
          and "resuming from" in err, err)
    rc, out, err = run_in(elsewhere, ["train", "--model", other, "--devices", "host:2", "--batch", "8", "--steps", "3",
                                      "--resume", step, "--no-shuffle"])
    check("train --resume with another model file: refused naming both", rc == 1
          and "made with the model file" in err and "r8.json" in err and "other.json" in err, err)

    # ---- torchvision's classifiers: memprof, plan and demo on each
    try:
        import torchvision  # noqa: F401
        classifiers = ("resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "densenet121", "vgg11")
    except ImportError:
        classifiers = ()
    for name in classifiers:
        path = at(name + ".json")
        rc, out, err = export([f"torchvision.models:{name}", "--kwargs", '{"num_classes": 10}', "--input", "3x32x32",
                               "--out", path])
        check(f"torchvision {name} exports", rc == 0, err)
        rc, out, err = run(["memprof", "--model", path, "--devices", "host:2", "--batch", "4"])
        check(f"memprof runs torchvision {name}", rc == 0 and "gpu0 excess" in out, out[-300:] + err)
        rc, out, err = run(["plan", "--model", path, "--devices", "meta:4", "--batch", "256"])
        check(f"plan runs torchvision {name}", rc == 0 and "gpu0 excess" in out, out[-300:] + err)
        rc, out, err = run(["demo", "--model", path, "--devices", "host:2", "--batch", "4"])
        check(f"demo narrates torchvision {name}", rc == 0 and "backward" in out, out[-300:] + err)

    # ---- data follows the file's input shape
    with open(at("small.py"), "w") as f:
        f.write("import torch.nn as nn\n\ndef net(classes=4):\n    return nn.Sequential(nn.Conv2d(2, 4, 3, 2, 1), "
                "nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, classes))\n")
    rc, out, err = export([at("small.py") + ":net", "--kwargs", '{"classes": 3}', "--input", "2x20x24", "--out",
                           at("small.json")])
    check("--kwargs reaches the callable", rc == 0 and json.load(open(at("small.json")))["nodes"][-1]["shape"] == [3],
          err)
    rc, out, err = run(["train", "--model", at("small.json"), "--devices", "host:2", "--batch", "8", "--steps", "2"])
    check("generated data follows the file's input shape and classes",
          rc == 0 and "generated images of shapes, [2, 20, 24]" in out + err, out + err)
    data = mnist_like_dir(tmp, 16, 4)
    expect("data of another shape is an error naming both", ["train", "--model", at("small.json"), "--data", data,
                                                              "--steps", "1"], 2, "takes [2, 20, 24] samples")
    expect("the GPT's flags are refused on a model file",
           ["train", "--model", at("small.json"), "--gpt-layers", "2"], 2, "has its own shape")
    expect("--init of another model is refused naming the tensor",
           ["train", "--model", at("small.json"), "--init", at("r8.safetensors"), "--steps", "1"], 2,
           "not those of the module")

    # ---- a last module that reads its own output in backward (a final ReLU): the loss's gradient
    # must not overwrite that output (it once did with --loss in-replica, and on one device)
    with open(at("relu_last.py"), "w") as f:
        f.write("import torch.nn as nn\n\ndef net():\n    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), "
                "nn.ReLU(), nn.Linear(8, 4), nn.ReLU())\n")
    rc, out, err = export([at("relu_last.py") + ":net", "--input", "3x2x2", "--out", at("relu_last.json")])
    check("a model ending in ReLU exports", rc == 0, err)
    weights = {}
    for devices in ("host:1", "host:2"):
        for loss in ("gathered", "in-replica"):
            path = at(f"relu_last_{devices[-1]}_{loss}.safetensors")
            rc, out, err = run(["train", "--model", at("relu_last.json"), "--devices", devices, "--batch", "16",
                                "--steps", "4", "--generated-size", "64", "--lr", "0.5", "--loss", loss,
                                "--save", path])
            weights[(devices, loss)] = read(path) if rc == 0 else None
            check(f"a model ending in ReLU trains on {devices}, --loss {loss}", rc == 0, err)
    for devices in ("host:1", "host:2"):
        check(f"a model ending in ReLU on {devices}: the same weights with the loss gathered and in-replica",
              weights[(devices, "gathered")] is not None
              and weights[(devices, "gathered")] == weights[(devices, "in-replica")])

    # ---- a token model: its context and vocabulary are the file's
    with open(at("tok.py"), "w") as f:
        f.write("import torch.nn as nn\n\nclass Tok(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.wte = nn.Embedding(256, 16)\n        self.ln = nn.LayerNorm(16)\n"
                "        self.head = nn.Linear(16, 256)\n\n    def forward(self, idx):\n"
                "        x = self.wte(idx)\n        return self.head(x + self.ln(x))\n")
    rc, out, err = export([at("tok.py") + ":Tok", "--input", "tokens:12", "--out", at("tok.json")])
    tok = json.load(open(at("tok.json"))) if rc == 0 else {}
    check("a token model exports with its input kind", rc == 0 and tok["input"]["kind"] == "tokens"
          and tok["nodes"][-1]["shape"] == [12, 256], err)
    rc, out, err = run(["train", "--model", at("tok.json"), "--devices", "host:2", "--batch", "6", "--steps", "3"])
    check("a token model file trains on the generated corpus", rc == 0 and "step 3/3" in out + err, out + err)
    rc, out, err = run(["memprof", "--model", at("tok.json"), "--devices", "host:2", "--batch", "6"])
    check("memprof runs a token model file", rc == 0 and "gpu0 excess" in out, out + err)
    # A token-mixing block pooled over its tokens: x.mean(dim=1) of [B, T, D] (not the trailing dims).
    with open(at("pool.py"), "w") as f:
        f.write("import torch.nn as nn\n\nclass Pool(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.mix = nn.Linear(8, 8)\n        self.head = nn.Linear(8, 3)\n\n    def forward(self, x):\n"
                "        x = self.mix(x.flatten(1, 2))\n        return self.head(x.mean(dim=1))\n")
    rc, out, err = export([at("pool.py") + ":Pool", "--input", "1x6x8", "--out", at("pool.json")])
    check("a mean over the tokens exports", rc == 0, err)
    rc, out, err = run(["train", "--model", at("pool.json"), "--devices", "host:2", "--batch", "6", "--steps", "2"])
    check("and trains (dp refused a mean over dimensions that are not the trailing ones)", rc == 0, out + err)
    # Attention written by hand, its scale from a traced size: b, t, d = x.shape, then (d // h) ** -0.5
    # (the export ended in NotASize's traceback): a constant of the exported shape.
    with open(at("attn.py"), "w") as f:
        f.write("import torch\nimport torch.nn as nn\n\nclass Attn(nn.Module):\n    def __init__(self, h=2):\n"
                "        super().__init__()\n        self.h = h\n        self.qkv = nn.Linear(8, 24)\n"
                "        self.head = nn.Linear(8, 3)\n\n    def forward(self, x):\n        x = x.flatten(1, 2)\n"
                "        b, t, d = x.shape\n        q, k, v = self.qkv(x).chunk(3, dim=-1)\n"
                "        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))\n"
                "        att = torch.softmax(q @ k.transpose(-2, -1) * (d // self.h) ** -0.5, dim=-1)\n"
                "        return self.head((att @ v).transpose(1, 2).reshape(b, t, d).mean(dim=1))\n")
    rc, out, err = export([at("attn.py") + ":Attn", "--input", "1x6x8", "--out", at("attn.json")])
    check("a scale computed from a traced size ((d // h) ** -0.5) exports as a constant", rc == 0 and '"factor": 0.5'
          in open(at("attn.json")).read(), err)
    rc, out, err = run(["train", "--model", at("attn.json"), "--devices", "host:2", "--batch", "6", "--steps", "2"])
    check("and trains", rc == 0, out + err)
    # A vocabulary smaller than the generated corpus's bytes: plan, memprof and train fold the bytes
    # into it and say so; token files with a larger id are refused naming the file's vocabulary.
    with open(at("tok60.py"), "w") as f:
        f.write(open(at("tok.py")).read().replace("256", "60"))
    rc, out, err = export([at("tok60.py") + ":Tok", "--input", "tokens:12", "--out", at("tok60.json")])
    check("a token model of vocabulary 60 exports", rc == 0, err)
    rc, out, err = run(["plan", "--model", at("tok60.json"), "--devices", "meta:4", "--batch", "8"])
    check("plan runs a token model file of a vocabulary under 256 (it refused the generated bytes)",
          rc == 0 and "gpu0 excess" in out, out + err)
    rc, out, err = run(["train", "--model", at("tok60.json"), "--devices", "host:2", "--batch", "6", "--steps", "1"])
    check("train on generated data says the bytes are folded into the vocabulary", rc == 0 and
          "folded into the model file's vocabulary of 60" in out + err, out + err)
    toks = at("toks")
    os.makedirs(toks, exist_ok=True)
    for name in ("train.bin", "val.bin"):
        with open(os.path.join(toks, name), "wb") as f:
            f.write(bytes(range(0, 140, 1)) * 4)  # uint16 ids up to 35,000: past 60
    expect("token ids past a model file's vocabulary", ["train", "--model", at("tok60.json"), "--data", toks,
                                                         "--steps", "1"], 2, "the model file's vocabulary of 60")
    rc, out, err = run(["train", "--model", at("tok.json"), "--devices", "host:1", "--steps", "1"])
    check("a token model file takes the GPT's default batch (32) and says 1 step", rc == 0 and
          "trained 1 step, 32 samples" in out, out + err)

    # ---- bad files: exit 2, the problem named, nothing written
    def bad(name, mutate, needle):
        d = copy.deepcopy(doc)
        text = mutate(d)
        path = at("bad.json")
        with open(path, "w") as f:
            f.write(text if isinstance(text, str) else json.dumps(d))
        expect(name, ["train", "--model", path, "--steps", "1", "--save", at("never.safetensors")], 2, needle)
        check(name + ": nothing written", not os.path.exists(at("never.safetensors")))

    def node(d, name):
        return next(n for n in d["nodes"] if n["name"] == name)

    bad("malformed JSON", lambda d: '{"format": "dp-model", ', "not valid JSON")
    bad("a number no double holds (a fuzz finding: nlohmann's own error escaped)",
        lambda d: json.dumps(d).replace('"version": 1', '"version": 1e405', 1), "not valid JSON (")
    bad("another format", lambda d: d.update(format="onnx"), "not a dp model file")
    bad("another version", lambda d: d.update(version=2), "format version 2")
    bad("an unknown op names its node", lambda d: node(d, "layer1_0_relu").update(op="swish"),
        "node 'layer1_0_relu' (swish, at resnet.py:")
    bad("an input naming no node", lambda d: node(d, "fc").update(inputs=["nowhere"]),
        "reads 'nowhere', which is neither the input nor a node")
    bad("an input naming a later node (a cycle)", lambda d: node(d, "conv1").update(inputs=["fc"]),
        "comes after it")
    bad("two nodes of one name", lambda d: node(d, "bn1").update(name="conv1"), "two nodes are named 'conv1'")
    bad("a shape that does not follow names the node and both shapes",
        lambda d: node(d, "fc")["attrs"].update(in_features=100),
        "node 'fc' (linear, at reference.py:61): Linear(in_features=100, out_features=10) expects inputs of shape "
        "[..., 100], got [128] (its input 'flatten' has shape [128])")
    bad("a recorded shape that differs", lambda d: node(d, "layer2_0_conv1").update(shape=[32, 15, 15]),
        "its output has shape [32, 16, 16], but the file records [32, 15, 15]")
    bad("state under another name", lambda d: d["state"][0].update(name="conv0.weight"), "conv0.weight")
    bad("state of another shape", lambda d: d["state"][0].update(shape=[16, 3, 5, 5]), "[16, 3, 5, 5]")
    bad("a module with parameters run twice", lambda d: node(d, "layer1_0_conv2").update(module="layer1.0.conv1"),
        "a second time")
    bad("stochastic depth of mode batch: refused, saying why",
        lambda d: node(d, "layer1_0_relu").update(op="stochastic_depth", attrs={"p": 0.1, "mode": "batch"}),
        "mode \"batch\" is not run by dp")
    bad("stochastic depth with p outside [0, 1]",
        lambda d: node(d, "layer1_0_relu").update(op="stochastic_depth", attrs={"p": 1.5, "mode": "row"}),
        "p must be in [0, 1]")
    bad("a value no node reads", lambda d: d.update(output="layer4_0_relu_1"), "no node reads its output")
    bad("an output that is not [classes]", lambda d: (d["nodes"].pop(), d["nodes"].pop(), d.update(output="avgpool"),
                                                     d.update(state=d["state"][:-2])),
        "cross-entropy needs [classes]")

CLI.finish()
