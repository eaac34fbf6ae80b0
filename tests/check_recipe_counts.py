"""tools/check/recipe_counts.py on a scratch repository whose history it must read: a strategy added
with three files (one new, two changed) beside a test and a doc, then a commit that adds nothing;
an op added to the loader's list; an Activation kind. Each recipe names the commit that added it
and counts its files.

usage: check_recipe_counts.py [ROOT]
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
SCRIPT = os.path.join(ROOT, "tools", "check", "recipe_counts.py")


def write(repo, path, text):
    os.makedirs(os.path.join(repo, os.path.dirname(path)), exist_ok=True)
    with open(os.path.join(repo, path), "w") as f:
        f.write(text)


def commit(repo, message):
    subprocess.run(["git", "-C", repo, "add", "-A"], check=True)
    subprocess.run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message], check=True)


def main():
    repo = tempfile.mkdtemp()
    subprocess.run(["git", "init", "-q", repo], check=True)
    history = [  # (message, {path: text}) a commit each
        ("the start", {"engine/step/sync_mode.hpp": "enum class SyncMode { Reduce, AllReduce };\n",
                       "engine/shapes/a.cpp": "a\n",
                       "models/graph/graph_ops.cpp": 'const std::vector<std::string> kSingleInputOps = {"relu", "linear"};\n',
                       "kernels/activation_math.hpp": "enum class Activation : int32_t { ReLU6, SiLU };\n"}),
        ("ZeRO-1", {"engine/step/sync_mode.hpp": "enum class SyncMode { Reduce, AllReduce, Zero1 };\n",
                    "engine/shapes/a.cpp": "a changed\n", "engine/shapes/sharded.cpp": "new\n",
                    "tests/test_zero.cpp": "t\n", "docs/zero.md": "d\n"}),
        ("a comment: adds no strategy",
         {"engine/step/sync_mode.hpp": "// a comment\nenum class SyncMode { Reduce, AllReduce, Zero1 };\n"}),
        ("the table, and pad", {"models/graph/graph_ops.cpp": 'static const std::vector<GraphOp> table = {\n'
                                '    {"relu", relu_node},\n    {"linear", linear_node},\n    {"pad", pad_node},\n};\n'}),
        ("Tanh", {"kernels/activation_math.hpp": "enum class Activation : int32_t { ReLU6, SiLU, Tanh };\n",
                  "models/tanh.cpp": "m\n"}),
    ]
    for message, files in history:
        for path, text in files.items():
            write(repo, path, text)
        commit(repo, message)
    out = subprocess.run(["/usr/bin/python3", SCRIPT, "--repo", repo], capture_output=True, text=True)
    print(out.stdout + out.stderr)
    lines = {line.split(" (")[0].split(":")[0]: line for line in out.stdout.splitlines()}
    checks = [
        ("strategy" in lines and "(Zero1): 3 files of code (1 new, 2 changed), 1 of tests, 1 of docs" in lines["strategy"]
         and "ZeRO-1" in lines["strategy"], "the strategy: ZeRO-1's commit, its files counted"),
        ("op" in lines and "(pad): 1 file of code" in lines["op"] and "the table, and pad" in lines["op"],
         "the op: read from the table where the list was, pad added"),
        ("elementwise op" in lines and "(Tanh): 2 files of code (1 new, 1 changed)" in lines["elementwise op"],
         "the elementwise op: Tanh"),
        ("model" in lines and "no addition found" in lines["model"], "no model list: said so"),
        (out.returncode == 0, "exit 0"),
    ]
    failed = [what for ok, what in checks if not ok]
    for what in failed:
        print(f"FAILED: {what}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
