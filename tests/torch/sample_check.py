"""--sample from a token model file: the file's length is fixed at export, so dp pads a shorter
context after its end; for a causal model (nanoGPT's masked attention) the tokens dp draws at
temperature 0 are PyTorch's greedy decoding of the same module and weights, prompt shorter than the
context and longer than it (cropped to the last T, as nanoGPT's generate crops to block_size).
dp train --sample on the file runs (it crashed: a shorter sequence ran through the file's fixed
sizes); a model whose output reads later tokens is refused before training, naming why.

usage: sample_check.py DP_BINARY   (exit 77 = skipped: no torch)
"""
import os
import re
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st_io  # noqa: E402

DP = os.path.abspath(sys.argv[1])
EXPORT = os.path.join(HERE, "..", "..", "tools", "export_model.py")
T, V = 12, 64
failed = 0

MODELS = f'''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attend(nn.Module):
    """One attention layer and a head, causal (nanoGPT's tril buffer and masked_fill) or not."""

    def __init__(self, causal=True):
        super().__init__()
        torch.manual_seed(3)
        self.causal = causal
        self.wte = nn.Embedding({V}, 16)
        self.wpe = nn.Embedding({T}, 16)
        self.qkv = nn.Linear(16, 48)
        self.head = nn.Linear(16, {V})
        self.register_buffer("bias", torch.tril(torch.ones({T}, {T})).view(1, {T}, {T}))

    def forward(self, idx):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(0, t, dtype=torch.long, device=idx.device))
        q, k, v = self.qkv(x).split(16, dim=2)
        a = (q @ k.transpose(-2, -1)) * 0.25
        if self.causal:
            a = a.masked_fill(self.bias[:, :t, :t] == 0, float("-inf"))
        return self.head(x + F.softmax(a, dim=-1) @ v)


def everywhere():
    return Attend(causal=False)
'''


def check(name, cond, detail=""):
    global failed
    print(("ok   " if cond else "FAIL ") + name)
    if not cond:
        failed += 1
        if detail:
            print("     " + str(detail)[-1500:])


def dp(args):
    p = subprocess.run([DP] + args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def sampled(out):
    m = re.search(r"sample \(\d+ tokens, temperature 0\):\n(.*)\n", out)
    return [int(x) for x in m.group(1).split()] if m else None


with tempfile.TemporaryDirectory() as tmp:
    at = lambda name: os.path.join(tmp, name)  # noqa: E731
    open(at("attend.py"), "w").write(MODELS)
    for name, spec in (("causal", "Attend"), ("everywhere", "everywhere")):
        p = subprocess.run(["/usr/bin/python3", EXPORT, at("attend.py") + ":" + spec, "--input", f"tokens:{T}", "--out",
                            at(name + ".json"), "--weights", at(name + ".safetensors")], capture_output=True, text=True)
        check(f"the {name} model exports", p.returncode == 0, p.stderr)
    data = at("tokens")
    os.makedirs(data)
    g = torch.Generator().manual_seed(5)
    for split in ("train", "val"):
        torch.randint(0, V, (400,), generator=g, dtype=torch.int32).to(torch.int16).numpy().astype("uint16").tofile(
            os.path.join(data, split + ".bin"))

    sys.path.insert(0, tmp)
    import attend  # noqa: E402
    model = attend.Attend().eval()
    weights = st_io.load(at("causal.safetensors"))
    model.load_state_dict({k: v for k, v in weights.items()}, strict=False)

    def greedy(prompt, n):
        ctx = list(prompt)
        with torch.no_grad():
            for _ in range(n):
                logits = model(torch.tensor([ctx[-T:]]))
                ctx.append(int(torch.argmax(logits[0, -1])))
        return ctx[len(prompt):]

    for prompt in ([5], [5, 9, 2], list(range(1, 2 * T, 2))):
        rc, out, err = dp(["eval", "--model", at("causal.json"), "--data", data, "--devices", "host:1", "--batch", "4",
                           "--weights",
                           at("causal.safetensors"), "--sample", "16", "--temperature", "0", "--prompt",
                           ",".join(map(str, prompt))])
        want = greedy(prompt, 16)
        shown = sampled(out)  # the prompt, then what was drawn
        got = shown[len(prompt):] if shown and shown[:len(prompt)] == prompt else shown
        check(f"eval --sample from {len(prompt)} prompt tokens is PyTorch's greedy decoding", rc == 0 and got == want,
              f"dp {got}\ntorch {want}\n{err[-600:]}")

    rc, out, err = dp(["train", "--model", at("causal.json"), "--data", data, "--devices", "host:2", "--batch", "4",
                       "--steps", "1", "--sample", "5", "--prompt", "8"])
    check("train --sample on a token model file (a crash before)", rc == 0 and "sample (5 tokens" in out, out + err)
    rc, out, err = dp(["train", "--model", at("causal.json"), "--data", data, "--devices", "host:2", "--batch", "4",
                       "--steps", "1", "--sample", "5", "--prompt", "8,40"])
    check("train --sample with two prompt tokens (a double free before)", rc == 0 and "sample (5 tokens" in out, out + err)
    saved = at("kept.safetensors")
    rc, out, err = dp(["train", "--model", at("everywhere.json"), "--data", data, "--devices", "host:2", "--batch", "4",
                       "--steps", "1", "--sample", "5", "--save", saved])
    check("a model that reads later tokens is refused before training", rc == 2 and
          "is not a causal language model" in err and "step 1/1" not in out + err and not os.path.exists(saved), out + err)
    rc, out, err = dp(["eval", "--model", at("everywhere.json"), "--data", data, "--devices", "host:1", "--batch", "4",
                       "--weights",
                       at("everywhere.safetensors"), "--sample", "5"])
    check("and by eval", rc == 2 and "is not a causal language model" in err, out + err)

print(f"{'FAILED' if failed else 'passed'}: {failed} failures")
sys.exit(1 if failed else 0)
