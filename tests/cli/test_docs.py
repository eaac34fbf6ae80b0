"""The documentation stays true: every flag of every dp command appears in that command's page
under docs/ (flags shared with dp train may be on docs/train.md); every command in the README's
code blocks runs and exits 0 (they are small by design); the README stays short (at most 200
lines, no prose paragraph over 8 lines); every relative link in the README and docs/ names a file
that exists; and the repository speaks of the software only (no words about how the work on it was
organised).

usage: test_docs.py DP_BINARY
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli  # noqa: E402

CLI = Cli()
check, run = CLI.check, CLI.run
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
README = open(os.path.join(ROOT, "README.md")).read()
PAGES = {"train": "train.md", "eval": "eval.md", "memprof": "memprof.md", "plan": "plan.md", "demo": "demo.md",
         "devices": "gpu.md"}


def doc(name):
    return open(os.path.join(ROOT, "docs", name)).read()


def flags_of(command):
    rc, out, err = run([command, "--help"])
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", out)) - {"--help"}


# ---- every flag documented on its command's page
train_flags = flags_of("train")
check("dp train --help lists its flags", len(train_flags) > 40, str(len(train_flags)))
for command, page in PAGES.items():
    text = doc(page)
    shared = doc("train.md")
    for flag in sorted(flags_of(command)):
        documented = re.search(rf"`{re.escape(flag)}(?![\w-])", text) or (
            flag in train_flags and command != "train" and re.search(rf"`{re.escape(flag)}(?![\w-])", shared))
        check(f"dp {command} {flag} is documented in docs/{page}", bool(documented))

# ---- the README: short, and its paragraphs too
lines = README.split("\n")
check("README.md is at most 200 lines", len(lines) <= 201, f"{len(lines)} lines")
in_code, para = False, []
for line in lines + [""]:
    if line.startswith("```"):
        in_code = not in_code
        para = []
        continue
    prose = not in_code and line.strip() and not line.startswith(("|", "#", "- ", "!["))
    if prose:
        para.append(line)
    else:
        check(f"README paragraph at most 8 lines: {para[0][:50] if para else ''!r}", len(para) <= 8, f"{len(para)} lines")
        para = []

# ---- links
for name in ["README.md"] + [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))
                             if f.endswith(".md")] + ["tools/gpu/README.md"]:
    path = os.path.join(ROOT, name)
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", open(path).read()):
        if re.match(r"[a-z]+:", target):
            continue
        check(f"{name}: the link to {target} names a file", os.path.exists(os.path.join(os.path.dirname(path), target)))


# ---- the README's commands run
def readme_commands():
    """Each command line of the README's sh blocks (continuations joined), tools/ scripts left out."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", README, re.S):
        text = block.replace("\\\n", " ")
        for line in text.split("\n"):
            line = line.split("  #")[0].strip()
            line = line.replace("tools/setup.sh && ", "")  # the quick start: setup is what this test runs in
            if line and not line.startswith(("tools/setup.sh", "tools/test.sh")):
                out.append(line)
    return out


def printed_after(command):
    """The output block the README shows right after the sh block holding `command` (its lines), or []."""
    for block, shown in re.findall(r"```sh\n(.*?)```\n```\n(.*?)```", README, re.S):
        if " ".join(command.split()) in " ".join(block.replace("\\\n", " ").split()):
            return [line for line in shown.splitlines() if line.strip()]
    return []


commands = readme_commands()
check("the README has commands to run", len(commands) >= 6, str(commands))
have_torch = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True).returncode == 0
with tempfile.TemporaryDirectory() as tmp:
    for command in commands:
        words = shlex.split(command)
        if words[0] == "python3" or words[0] == "tools/export_model.py":  # the exporter: PyTorch's
            if not have_torch:
                print(f"skipped (no torchvision): {command}")
                continue
            if words[0] == "python3":
                words[0] = sys.executable
        words = [CLI.dp if w == "build/dp" else os.path.join(ROOT, w) if w.startswith("tools/") else w for w in words]
        p = subprocess.run(words, cwd=tmp, capture_output=True, text=True, errors="replace", timeout=600)
        check(f"README command runs: {command[:90]}", p.returncode == 0, f"exit {p.returncode}: {p.stderr[-800:]}")
        # Memory figures are exact (no timing in them): each line the README shows is the start of a
        # line the command prints (the README leaves out rows and the last columns, "..." ends a cut row).
        shown = printed_after(command)
        if shown and words[1] in ("plan", "memprof"):
            got = [" ".join(line.split()) for line in p.stdout.splitlines()]
            for line in shown:
                want = " ".join(line.split())
                want = want[:-3].rstrip(" ,") if want.endswith("...") else want
                check(f"README shows what {words[1]} prints: {want[:70]}", any(g.startswith(want) for g in got),
                      "\n".join(got[:12]))
    quick = re.search(r"tools/setup.sh && (build/dp [^#\n]*)", README)
    check("the quick start's main job is among the commands run", quick is not None and
          quick.group(1).strip() in commands, commands)

# ---- only the software: no words about how the work on it was organised
try:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
except (OSError, subprocess.CalledProcessError):
    files = []
# (Spelled with character classes so this file does not match its own words.)
banned = re.compile(r"\b(this|GPU|next|later|a) sessio[n]\b|\bsessio[n] \d+|\blea[s]e[sd]?\b|devic[e] time|devic[e] tool|"
                    r"\biss[u]es? \d+\b|\(iss[u]es?: |the iss[u]e's|for this iss[u]e|\bGPU was len[t]|\bgive_bac[k]\b|"
                    r"\bbudget_lef[t]", re.I)
for name in files:
    if not name.endswith((".md", ".py", ".cpp", ".hpp", ".cu", ".cuh", ".sh", ".cmake", ".txt", ".awk")):
        continue
    for n, line in enumerate(open(os.path.join(ROOT, name), errors="replace"), 1):
        m = banned.search(line)
        if m:
            check(f"{name}:{n} speaks of the software only", False, f"{m.group(0)!r} in: {line.strip()[:160]}")

CLI.finish()
