#!/usr/bin/python3
"""How many files the last change of each recipe's kind touched (docs/architecture.md, "Recipes"),
measured in git, so the counts the recipes state stay true: the last elementwise op (an
Activation kind: kernel, module, table entries), the last op added to the model-file loader's table,
the last built-in model added to the registry, the last strategy (a --sync mode) added. For each, the commit that added it is found by reading the names at every commit that
changed where they are listed, and its files are counted: code (new and changed), tests, docs.
A change of a kind spread over several commits counts its adding commit only (say so where it
matters). A data format has no one list in the code: not measured.

usage: recipe_counts.py [--repo DIR]
"""
import argparse
import re
import subprocess

# Each recipe: where its names are listed (paths at any commit, as git grep takes them), and how to
# read them from those files' text.
RECIPES = {
    # an elementwise op: a kernel, a module, its table entries (Hardswish and Hardsigmoid the last)
    "elementwise op": (["kernels/activation_math.hpp"],
                       lambda text: set(sum((m.split(",") for m in
                                             re.findall(r"enum class Activation[^{]*\{([^}]*)\}", text)), [])) - {""}),
    # any op of the model-file loader's table (a graph-only op like pad among them)
    "op": (["models/graph/graph_ops.cpp"],
           # the op table's entries ({"name", maker}) or, before it, the two name lists
           lambda text: set(re.findall(r'^\s*\{"([a-z0-9_]+)",', text, re.M)) | list_names(text)),
    "model": (["models/registry.cpp"],
              lambda text: set(re.findall(r'^\s*\{"([a-z0-9_]+)", "', text, re.M)) |
              set(re.findall(r'def\.name = "([a-z0-9_]+)"', text))),
    "strategy": (["engine/step/sync_mode.hpp", "engine/shapes/sync_mode.hpp", "engine/sync_mode.hpp",
                  "engine/data_parallel_options.hpp", "engine/data_parallel.hpp"],
                 lambda text: set(sum((m.split(",") for m in re.findall(r"enum class SyncMode \{([^}]*)\}", text)),
                                      [])) - {""}),
}


def list_names(text):
    """The names in `kSingleInputOps = {...}` and `kMultiInputOps = {...}` (the loader before its table)."""
    names = set()
    for body in re.findall(r"k(?:Single|Multi)InputOps = \{([^}]*)\}", text):
        names |= set(re.findall(r'"([a-z0-9_]+)"', body))
    return names


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=False).stdout


def names_at(repo, commit, paths, read):
    names = set()
    for path in paths:
        text = git(repo, "show", f"{commit}:{path}")
        names |= {n.strip() for n in read(text)}
    return names


def last_addition(repo, paths, read):
    """(commit, the names it added) of the latest commit that added a name, or None."""
    commits = git(repo, "log", "--format=%H", "--", *paths).split()
    for commit in commits:  # newest first
        parents = git(repo, "log", "-1", "--format=%P", commit).split()
        before = names_at(repo, parents[0], paths, read) if parents else set()
        added = names_at(repo, commit, paths, read) - before
        if added:
            return commit, sorted(added)
    return None


def files_of(repo, commit):
    """The commit's files: (status, path) for each."""
    out = git(repo, "show", "--format=", "--name-status", commit)
    return [line.split("\t")[0][0] + "\t" + line.split("\t")[-1] for line in out.splitlines() if line.strip()]


def kind_of(path):
    if path.startswith("tests/"):
        return "tests"
    if path.startswith("docs/") or path.endswith(".md"):
        return "docs"
    return "code"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", default=".")
    a = p.parse_args()
    for recipe, (paths, read) in RECIPES.items():
        found = last_addition(a.repo, paths, read)
        if found is None:
            print(f"{recipe}: no addition found in git")
            continue
        commit, added = found
        subject = git(a.repo, "log", "-1", "--format=%h %ad %s", "--date=short", commit).strip()
        files = files_of(a.repo, commit)
        count = {"code": [0, 0], "tests": 0, "docs": 0}
        for f in files:
            status, path = f.split("\t")
            if kind_of(path) == "code":
                count["code"][0 if status == "A" else 1] += 1
            else:
                count[kind_of(path)] += 1
        code = count["code"][0] + count["code"][1]
        print(f"{recipe} ({', '.join(added)}): {code} file{'' if code == 1 else 's'} of code ({count['code'][0]} new, "
              f"{count['code'][1]} changed), {count['tests']} of tests, {count['docs']} of docs — {subject[:100]}")
    print("data format: not measured (no one list of formats in the code)")


if __name__ == "__main__":
    main()
