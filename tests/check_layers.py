#!/usr/bin/python3
"""The layers the build keeps (docs/architecture.md, CMakeLists.txt): every #include of a project
header must point to the file's own layer or one below it. An include that goes up (kernels/
including runtime/) or sideways where not allowed (data/ including engine/) fails, naming the
file, the line and the header. Inside engine/ its folders are layers too: comm/, precision/ and
split/ at the bottom, then optim/, step/, shapes/, and engine/'s own files at the top. An include is
seen in every spelling: "engine/step/x.hpp" from the root, "../step/x.hpp" or "x.hpp" from the
including file's folder, and <engine/step/x.hpp>. Below tools/dp, a string literal that names a CLI
flag ("--split") fails too: the library names a setting through core/setting_name.hpp, and the CLI
maps it to its flag. A step shape (engine/shapes/) reads the StepEngine's state through its
accessors and changes it through its methods: a reach into one of its parts (`e_.master.gradients`)
fails as well.

usage: check_layers.py [ROOT]
"""
import os
import re
import sys

# Each layer and the layers it may include, besides itself.
ALLOWED = {
    "core": set(),
    "kernels": {"core"},
    "runtime": {"core", "kernels"},
    "models": {"core", "kernels", "runtime"},
    "io": {"core", "kernels", "runtime", "models"},
    "data": {"core", "kernels", "runtime", "io"},
    "engine": {"core", "kernels", "runtime", "models", "io", "data"},
    "plan": {"core", "kernels", "runtime", "models", "io", "data", "engine"},
    "tools/dp": {"core", "kernels", "runtime", "models", "io", "data", "engine", "plan"},
}
# engine/'s folders, each with those it may include (besides itself); engine/'s own files take any.
ENGINE_ALLOWED = {
    "engine/comm": set(),
    "engine/precision": set(),
    "engine/split": set(),
    "engine/optim": {"engine/comm", "engine/precision", "engine/split"},
    "engine/step": {"engine/comm", "engine/precision", "engine/split", "engine/optim"},
    "engine/shapes": {"engine/comm", "engine/precision", "engine/split", "engine/optim", "engine/step"},
}
INCLUDE = re.compile(r'\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)')
# A string literal holding a flag, outside comments: "--split", "... (--host-sync phase)".
LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"')
FLAG = re.compile(r'--[a-z]')
# A shape reaching into the StepEngine's parts (engine/step/step_engine.hpp).
ENGINE_PART = re.compile(r'\be_\s*\.\s*(replicas|master|policy|scaling|progress|inputs|process)\b')


def layer_of(path):
    """The layer a repository path belongs to, or None (a system header, a generated one)."""
    if path.startswith("tools/dp/"):
        return "tools/dp"
    top = path.split("/", 1)[0]
    return top if top in ALLOWED else None


def engine_part(path):
    """engine/'s folder a repository path lies in ("engine/step"), "engine" for its own files, or None."""
    parts = path.split("/")
    if parts[0] != "engine":
        return None
    return "engine/" + parts[1] if len(parts) > 2 and "engine/" + parts[1] in ENGINE_ALLOWED else "engine"


def included_path(root, including, header, quoted):
    """The repository path an include names, or None for a header outside the repository (a system
    one, a generated one). Quoted: the including file's folder first, then the root (the build's
    include path); angle brackets: the root."""
    candidates = [os.path.join(os.path.dirname(including), header)] if quoted else []
    candidates.append(os.path.join(root, header))
    for c in candidates:
        c = os.path.normpath(c)
        if os.path.isfile(c) and c.startswith(root + os.sep):
            return os.path.relpath(c, root).replace(os.sep, "/")
    return None


def strip_comment(line):
    """The line without a // comment (one inside a string literal is kept)."""
    in_string = False
    for i, ch in enumerate(line):
        if ch == '"' and (i == 0 or line[i - 1] != "\\"):
            in_string = not in_string
        elif not in_string and line.startswith("//", i):
            return line[:i]
    return line


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad, files = [], 0
    for layer in ALLOWED:
        for folder, _, names in os.walk(os.path.join(root, layer)):
            for name in sorted(names):
                if not name.endswith((".cpp", ".hpp", ".cu", ".cuh", ".h")):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root)
                files += 1
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            if rel.startswith("engine/shapes/") and ENGINE_PART.search(strip_comment(line)):
                                bad.append(f"{rel}:{number}: a step shape reaches into the StepEngine's state "
                                           "(read it through the accessors, change it through the methods)")
                            if layer != "tools/dp":
                                for literal in LITERAL.findall(strip_comment(line)):
                                    if FLAG.search(literal):
                                        bad.append(f"{rel}:{number}: {layer}/ names a flag in {literal} "
                                                   "(name the setting with setting(), core/setting_name.hpp)")
                            continue
                        header = m.group(1) or m.group(2)
                        target = included_path(root, path, header, m.group(1) is not None)
                        if target is None:
                            continue
                        to = layer_of(target)
                        if to is not None and to != layer and to not in ALLOWED[layer]:
                            bad.append(f"{rel}:{number}: {layer}/ includes {header} ({to}/ is not below {layer}/)")
                            continue
                        part, to_part = engine_part(rel), engine_part(target)
                        if (part and to_part and part != "engine" and to_part != part and
                                to_part not in ENGINE_ALLOWED[part]):
                            bad.append(f"{rel}:{number}: {part}/ includes {header} ({to_part}/ is not below {part}/ "
                                       "inside engine/)")
    for b in bad:
        print(b)
    print(f"{files} files, {len(bad)} includes or flags against the layers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
