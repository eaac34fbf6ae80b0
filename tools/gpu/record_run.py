"""Records a GPU run of tools/gpu/verify.py from what came back ($OUT: summary.txt, the stage logs,
or logs.tar.gz holding them), as generated text rather than prose written by hand:

- README.md's "On GPUs" table gets the run's row on top (GPU, driver and CUDA, date, what passed:
  each passing stage with its own summary); the table keeps its three newest rows;
- tools/bench/RESULTS.md gets a dated section: every stage's summary line, then the capabilities
  stage's tables and the bench stage's, as the run printed them;
- tools/gpu/sanitized.txt gets the run's clean sanitizer verdicts (keys not there yet);
- tests/fixtures/gpu-memprof gets the capabilities stage's memprof reports from the GPU (fixtures/:
  each run's flags, the GPU and its report, a model file beside them), each with the run's date:
  the CPU test of the plan holds the plan to them. A file of the same name is replaced.

usage: record_run.py OUT_DIR [--date YYYY-MM-DD] [--root .]
Exit 2 when OUT_DIR holds no summary.txt or no probe line (nothing to say which GPU ran).
"""
import argparse
import datetime
import json
import os
import re
import sys
import tarfile

TABLE_HEADER = "| GPU | driver, CUDA | date | what passed |"
KEEP_ROWS = 3


def outputs(out_dir):
    """{file name: text} of what came back, logs.tar.gz's members included."""
    files = {}
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if name == "logs.tar.gz":
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.isfile() and not member.name.endswith(".gz"):
                        files[os.path.basename(member.name)] = tar.extractfile(member).read().decode(errors="replace")
        elif os.path.isfile(path) and not name.endswith(".gz"):
            files[name] = open(path, errors="replace").read()
    return files


def fixtures(out_dir):
    """{file name: bytes} of the fixtures that came back (fixtures/ in logs.tar.gz, or a folder)."""
    found = {}
    packed = os.path.join(out_dir, "logs.tar.gz")
    if os.path.exists(packed):
        with tarfile.open(packed) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if member.isfile() and len(parts) == 2 and parts[0] == "fixtures":
                    found[parts[1]] = tar.extractfile(member).read()
    folder = os.path.join(out_dir, "fixtures")
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            with open(os.path.join(folder, name), "rb") as f:
                found[name] = f.read()
    return found


def record_fixtures(root, found, date):
    """Writes them into tests/fixtures/gpu-memprof; each memprof report gets the run's date."""
    folder = os.path.join(root, "tests", "fixtures", "gpu-memprof")
    os.makedirs(folder, exist_ok=True)
    for name, data in sorted(found.items()):
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            continue  # only plain names are written into the tree
        if name.startswith("memprof-") and name.endswith(".json"):
            fixture = json.loads(data)
            fixture["date"] = date
            data = (json.dumps(fixture, separators=(",", ":"), sort_keys=True) + "\n").encode()
        tmp = os.path.join(folder, name + ".part")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(folder, name))
    return len(found)


def stages(summary):
    """[(verdict, stage, what)] of summary.txt's lines (PASS, FAIL or SKIP)."""
    found = []
    for line in summary.splitlines():
        m = re.match(r"^(PASS|FAIL|SKIP) ([a-z]+)(?: \(exit \d+\))?: (.*)$", line)
        if m:
            found.append(m.groups())
    return found


def machine(files, summary_stages):
    """(GPU name, "driver, CUDA") from the probe's line and log."""
    probe = next((what for verdict, stage, what in summary_stages if stage == "probe"), None)
    if probe is None:
        return None, None
    fields = [f.strip() for f in probe.split(";")[0].split(",")]
    gpu = fields[0].removeprefix("NVIDIA ") if fields else "unknown GPU"
    driver = fields[1] if len(fields) > 1 else "?"
    cuda = re.search(r"release (\d+\.\d+)", files.get("probe.log", ""))
    return gpu, f"{driver}, {cuda.group(1) if cuda else '?'}"


def passed_text(summary_stages):
    said = []
    for verdict, stage, what in summary_stages:
        if verdict != "PASS" or stage in ("probe", "build", "prime"):  # the machine, the binaries, a cache: no check
            continue
        said.append(f"{stage}: {re.sub(r',? in [0-9]+ s.*$', '', what)[:110]}")
    return "; ".join(said).replace("|", "/") or "nothing passed"


def update_readme(path, row):
    text = open(path).read()
    start = text.index(TABLE_HEADER)
    lines = text[start:].split("\n")
    rows = []
    for line in lines[2:]:  # the table's rows: up to its first line that is not one
        if not line.startswith("|"):
            break
        rows.append(line)
    end = start + len("\n".join(lines[:2 + len(rows)]))
    table = "\n".join(lines[:2] + ([row] + rows)[:KEEP_ROWS])
    write(path, text[:start] + table + text[end:])


def section(date, gpu, driver_cuda, summary_stages, files):
    out = [f"\n## {date} — GPU run ({gpu}): tools/gpu/verify.py, recorded by tools/gpu/record_run.py\n",
           f"GPU {gpu}, driver and CUDA {driver_cuda}.\n", "| stage | result | what |", "|---|---|---|"]
    for verdict, stage, what in summary_stages:
        out.append(f"| {stage} | {verdict} | {what.replace('|', '/')} |")
    for name, title in (("capabilities.md", "The capabilities stage"), ("bench.md", "The bench stage")):
        if name in files:
            out += ["", f"**{title}** (`{name}` as it came back):", "", files[name].strip()]
    return "\n".join(out) + "\n"


def write(path, text):
    tmp = path + ".part"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    a = ap.parse_args()
    files = outputs(a.out_dir)
    if "summary.txt" not in files:
        sys.exit(f"record_run.py: {a.out_dir} holds no summary.txt (verify.py writes it)")
    summary_stages = stages(files["summary.txt"])
    gpu, driver_cuda = machine(files, summary_stages)
    if gpu is None:
        print(f"record_run.py: {a.out_dir}'s summary has no probe line: run verify.py with its probe stage", file=sys.stderr)
        sys.exit(2)
    readme = os.path.join(a.root, "README.md")
    update_readme(readme, f"| {gpu} | {driver_cuda} | {a.date} | {passed_text(summary_stages)} |")
    results = os.path.join(a.root, "tools", "bench", "RESULTS.md")
    write(results, open(results).read().rstrip("\n") + "\n" + section(a.date, gpu, driver_cuda, summary_stages, files))
    record = os.path.join(a.root, "tools", "gpu", "sanitized.txt")
    known = set(open(record).read().splitlines()) if os.path.exists(record) else set()
    fresh = [line for line in files.get("sanitized.txt", "").splitlines() if line and line not in known]
    if fresh:
        write(record, (open(record).read() if os.path.exists(record) else "") + "\n".join(fresh) + "\n")
    count = record_fixtures(a.root, fixtures(a.out_dir), a.date)
    print(f"recorded {gpu} ({driver_cuda}, {a.date}): README.md's GPU table, RESULTS.md's section, "
          f"{len(fresh)} clean sanitizer verdict(s) in tools/gpu/sanitized.txt, {count} file(s) in "
          "tests/fixtures/gpu-memprof")


if __name__ == "__main__":
    main()
