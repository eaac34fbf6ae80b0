"""The GPU check script, tools/gpu/verify.py, run here without a GPU: a GPU run is time-boxed and
cannot be spent finding a bug in its plumbing. In a scratch copy of the tree whose build-gpu holds
this build's binaries, with a stand-in compute-sanitizer on the PATH:
- tests: every GPU case runs in its own process and, with no GPU, fails (DP_REQUIRE_GPU=1), each
  counted and named; so does poisoned (the same with DP_POISON_ALLOCATIONS=1), in its own log;
- sanitize: every run's verdict is counted; the cases whose CUDA calls fail by design run without
  API-error reports, the case that compares times under memcheck only; a second call with the same
  binaries takes the first call's verdicts instead of running again, and so does a fresh machine from the
  clean verdicts recorded at the same sources (tools/gpu/sanitized.txt), but not after a source changed;
  --within cuts slow runs, which count as unfinished, never clean, and the call ends inside its time;
- more than 8 files under $OUT: all but the summary are packed into one archive; record_run.py
  turns what came back into README's GPU row, a RESULTS.md section and sanitized.txt's new keys;
- sanitize with a dirty run: counted dirty, its findings tallied by kind and place;
- sanitize on a GPU compute-sanitizer cannot instrument (gVisor): one try, then a failed stage
  saying why, not a hundred runs read as dirty;
- unit, with prebuilt binaries (no ctest files): each unit case in its own process, counted;
- capabilities: tools/gpu/capabilities.py on host devices (the plan equal to memprof, ZeRO's stages
  within tolerance of host:4 and allreduce, a missing model file named, nanoGPT's model file's one
  update within its spread), and its stage failing without a GPU, naming what failed;
- mpi: the MPI suite's count in the summary, its own skip (a dp without MPI) a SKIP line, its failure
  the stage's;
- a stage left with too little time is skipped and says so; an unknown stage is an error;
- the profile's helpers: kernel_times.py reads Nsight Compute's CSV in either unit spelling and
  names an unknown unit; phase_table.py puts real runs' phases side by side in the step's order;
- the bench (tools/bench/bench_gpu.py): a budgeted table 1 row, table 9 at --small's sizes (dp's
  GPT and nanoGPT's file against PyTorch's), the prime with nothing to compile.

usage: test_gpu_verify.py DP_BINARY DP_GPU_TESTS_BINARY
"""
import glob
import gzip
import io
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
dp, gpu_tests = (os.path.abspath(p) for p in sys.argv[1:3])
c = Checks()


def cases():
    out = subprocess.run([gpu_tests, "--list-test-cases", "--no-intro"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line and not line.startswith(("[doctest]", "==="))]


def export_nanogpt(path, context):
    """nanoGPT's model.py GPT (tests/torch/nanogpt_model.py, untied), tiny, as a model file."""
    config = {"block_size": context, "vocab_size": 256, "n_layer": 2, "n_head": 2, "n_embd": 32}
    return subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "export_model.py"),
                           os.path.join(ROOT, "tests", "torch", "nanogpt_model.py") + ":untied", "--kwargs",
                           json.dumps(config), "--input", f"tokens:{context}", "--out", path],
                          capture_output=True, text=True, check=True)


with tempfile.TemporaryDirectory() as tmp:
    tree = os.path.join(tmp, "tree")
    shutil.copytree(os.path.join(ROOT, "tools"), os.path.join(tree, "tools"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    os.makedirs(os.path.join(tree, "build-gpu", "tests"))
    os.symlink(dp, os.path.join(tree, "build-gpu", "dp"))
    # the GPU test binary behind a wrapper that notes each case run's DP_POISON_ALLOCATIONS
    poison_seen = os.path.join(tmp, "poison-seen")
    wrapper = os.path.join(tree, "build-gpu", "tests", "dp_gpu_tests")
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\ncase "$1" in -tc=*) echo "${{DP_POISON_ALLOCATIONS:-unset}}" >>"{poison_seen}";; esac\n'
                f'exec "{gpu_tests}" "$@"\n')
    os.chmod(wrapper, 0o755)
    os.symlink(os.path.join(os.path.dirname(gpu_tests), "dp_tests"), os.path.join(tree, "build-gpu", "tests", "dp_tests"))
    open(os.path.join(tree, "build-gpu", "env.sh"), "w").close()
    fake = os.path.join(tmp, "bin")
    os.makedirs(fake)
    sanitizer = os.path.join(fake, "compute-sanitizer")
    started = os.path.join(tmp, "sanitizer-runs")  # one line per start of the stand-in
    with open(sanitizer, "w") as f:  # sleeps $FAKE_SANITIZER_SECONDS, then reports a clean run
        f.write('#!/bin/sh\n'
                # what it says of itself; with $FAKE_SANITIZER_OPTIONS its help lists the options for Hopper's stores
                'case "$1" in --version) echo "Version 2099.1.0"; exit 0;;\n'
                '  --help) [ -n "$FAKE_SANITIZER_OPTIONS" ] && echo "  --check-bulk-copy arg\n  --check-warpgroup-mma arg"; '
                'exit 0;; esac\n'
                f'echo "run $*" >>"{started}"\n'
                # as on gVisor: the GPU refused, the program's first allocation fails
                'if [ -n "$FAKE_SANITIZER_UNSUPPORTED" ]; then\n'
                '  echo "========= Error: Device not supported"; echo "CUDA error 999 at cudaMalloc"; exit 1\nfi\n'
                # the runs whose command matches the pattern $FAKE_SANITIZER_FINDINGS: three findings, two kinds
                # (with $FAKE_SANITIZER_CLEAN_POISONED, none when every allocation is written first)
                'if [ -n "$FAKE_SANITIZER_CLEAN_POISONED" ] && [ -n "$DP_POISON_ALLOCATIONS" ]; then\n'
                '  echo "========= ERROR SUMMARY: 0 errors"; exit 0\nfi\n'
                # the runs matching $FAKE_SANITIZER_INTERNAL: the tool fails itself, but where a filter names the
                # kernels to check (as racecheck on cuDNN's bf16 convolutions did on an H100)
                # ($FAKE_SANITIZER_INTERNAL_OURS: there too, where it names dp's kernels, as it has;
                # $FAKE_SANITIZER_INTERNAL_NONE: even where the filter matches no kernel, as it has)
                'internal() { echo "========= Internal Sanitizer Error: The Sanitizer failed to handle a '
                'hardware exception."\n  echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; exit 99; }\n'
                'if [ -n "$FAKE_SANITIZER_INTERNAL" ]; then case "$*" in $FAKE_SANITIZER_INTERNAL)\n'
                '  case "$*" in *"--kernel-name regex=^instrument-no-kernel"*) [ -n "$FAKE_SANITIZER_INTERNAL_NONE" ] && internal ;;\n'
                '    *"--kernel-name regex="*) [ -n "$FAKE_SANITIZER_INTERNAL_OURS" ] && internal ;;\n'
                '    *) internal ;; esac ;; esac; fi\n'
                'if [ -n "$FAKE_SANITIZER_FINDINGS" ]; then case "$*" in $FAKE_SANITIZER_FINDINGS)\n'
                '  for i in 1 2; do echo "========= Uninitialized __global__ memory read of size 4 bytes"\n'
                '    echo "=========     at void k<float>(float *)+0x150"; done\n'
                '  echo "========= Host API memory access error at host access to 0x7f00 of size 512 bytes"\n'
                '  echo "=========         Host Frame: cuGraphLaunch [0x3a] in libcuda.so.1"\n'
                '  echo "=========         Host Frame: dp::DataParallel::step(int) [0x4b] in dp"\n'
                '  echo "========= ERROR SUMMARY: 3 errors"; exit 99;; esac; fi\n'
                'sleep "${FAKE_SANITIZER_SECONDS:-0}"\necho "========= ERROR SUMMARY: 0 errors"\n')
    os.chmod(sanitizer, os.stat(sanitizer).st_mode | stat.S_IEXEC)
    done = os.path.join(tmp, "done")  # where finished sanitizer runs are kept between calls

    def verify(args, out, seconds=0, timeout=300, unsupported=False, findings="", options=False, clean_poisoned=False,
               internal="", internal_ours=False, internal_none=False, settings=None, path_first=None):
        # settings: the caller's variables for verify.py (DP_SANITIZE_MATCH, ...), for this call only;
        # path_first: a folder of stand-ins searched before the others
        path = os.pathsep.join([*([path_first] if path_first else []), fake, os.environ["PATH"]])
        env = dict(os.environ, **{"DP_PACK_LOGS": "0", "DP_SANITIZE_RECORDED": "/dev/null", **(settings or {})}, OUT=out, PATH=path, DP_SANITIZE_JOBS="4",
                   FAKE_SANITIZER_INTERNAL=internal, FAKE_SANITIZER_INTERNAL_OURS="1" if internal_ours else "",
                   FAKE_SANITIZER_INTERNAL_NONE="1" if internal_none else "",
                   FAKE_SANITIZER_SECONDS=str(seconds), DP_SANITIZE_DONE_ROOT=done,
                   FAKE_SANITIZER_OPTIONS="1" if options else "", FAKE_SANITIZER_CLEAN_POISONED="1" if clean_poisoned else "",
                   FAKE_SANITIZER_UNSUPPORTED="1" if unsupported else "", FAKE_SANITIZER_FINDINGS=findings)
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, os.path.join(tree, "tools", "gpu", "verify.py")] + args, env=env,
                           capture_output=True, text=True, timeout=timeout)
        summary = os.path.join(out, "summary.txt")
        return p, open(summary).read() if os.path.exists(summary) else "", time.monotonic() - t0

    names = cases()
    c.check("the GPU test binary lists its cases", len(names) > 10, names)

    # ---- tests: each case in its own process, each failing without a GPU
    out = os.path.join(tmp, "out-tests")
    p, summary, _ = verify(["tests"], out)
    log = open(os.path.join(out, "tests.log")).read() if os.path.exists(os.path.join(out, "tests.log")) else ""
    c.check("tests: a summary line", f"0 of {len(names)} GPU cases pass, {len(names)} fail, 0 not run" in summary,
            summary + p.stderr)
    c.check("tests: each case named with its failure", all("FAIL (exit 1, " in log and n in log for n in names)
            and log.count("no usable CUDA GPU") == len(names), log[-2000:])
    c.check("tests: the exit status counts the failed stage", p.returncode == 1, p.returncode)
    seen_tests = open(poison_seen).read().split() if os.path.exists(poison_seen) else []
    os.remove(poison_seen)
    out = os.path.join(tmp, "out-poisoned")
    p, summary, _ = verify(["poisoned"], out)
    seen_poisoned = open(poison_seen).read().split() if os.path.exists(poison_seen) else []
    c.check("tests runs each case without DP_POISON_ALLOCATIONS, poisoned with it set to 1",
            seen_tests == ["unset"] * len(names) and seen_poisoned == ["1"] * (len(names) - 1),
            (seen_tests[:5], seen_poisoned[:5]))
    log = open(os.path.join(out, "poisoned.log")).read() if os.path.exists(os.path.join(out, "poisoned.log")) else ""
    timed = [n for n in names if "replica times on a GPU" in n]
    c.check("poisoned: the same cases under their own name and log, but the one that compares times",
            len(timed) == 1 and f"FAIL poisoned (exit {len(names) - 1}): 0 of {len(names)} GPU cases pass, "
            f"{len(names) - 1} fail, 0 not run, 1 left out, in " in summary
            and log.count("no usable CUDA GPU") == len(names) - 1 and f"LEFT OUT: {timed[0]}" in log,
            summary + log[-1000:])

    # ---- sanitize: every run counted; a second call takes the first one's verdicts
    out = os.path.join(tmp, "out-sanitize")
    open(started, "w").close()
    p, summary, _ = verify(["sanitize"], out)
    runs = open(os.path.join(out, "sanitize.log")).read().count("== compute-sanitizer") \
        if os.path.exists(os.path.join(out, "sanitize.log")) else 0
    c.check("sanitize: every run clean under the stand-in", p.returncode == 0 and f"{runs} of {runs} compute-sanitizer "
            "runs clean, 0 dirty, 0 unfinished (time limit); 0 verdicts from an earlier call" in summary
            and runs > 4 * len(names), summary + p.stderr[-2000:])
    starts = [line for line in open(started).read().splitlines() if line.startswith("run ")]

    def runs_of(case):
        return [line for line in starts if case in line]
    failing = runs_of("a failed CUDA call is reported once")
    c.check("sanitize: a case that fails a CUDA call by design runs without API-error reports, under every tool",
            len(failing) == 4 and all("--report-api-errors no" in line for line in failing), failing)
    out_of_memory = [line for line in starts if "memory comes back" in line or "sibling's cache" in line]
    c.check("sanitize: the out-of-memory cases run without API-error reports (cudaMalloc fails by design), "
            "under memcheck and initcheck",
            len(out_of_memory) == 4 and all("--report-api-errors no" in line for line in out_of_memory), out_of_memory)
    c.check("sanitize: the other cases keep API-error reports",
            sum("--report-api-errors" in line for line in starts)
            == len(failing) + len(out_of_memory) + 4 * any("NCCL on one GPU" in n for n in names),
            [line for line in starts if "--report-api-errors" in line])
    races = [line for line in starts if "--tool racecheck" in line]
    step_races = [line for line in races if "dp_gpu_tests" in line and "cuda:0x" in line]
    c.check("sanitize: racecheck on the step cases leaves the libraries' kernels out, and only there",
            len(step_races) > 5 and all("--kernel-name-exclude regex=" in line for line in step_races)
            and not any("--kernel-name-exclude" in line for line in races if line not in step_races)
            and any("--tool racecheck" in line and "dp train" not in line and "cuda:0x" not in line for line in races),
            races[:5])
    sys.path.insert(0, os.path.join(ROOT, "tools", "gpu"))
    import verify_sanitize  # noqa: E402
    library = verify_sanitize.LIBRARY_KERNELS
    ours = sorted({m.group(1) for path in glob.glob(os.path.join(ROOT, "kernels", "**", "*.cu*"), recursive=True)
                   + glob.glob(os.path.join(ROOT, "engine", "**", "*.cu*"), recursive=True)
                   for m in re.finditer(r"__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s+)?(?:void\s+)?(\w+)\s*\(",
                                        open(path).read())})
    c.check("sanitize: no kernel of dp's has a name the libraries' pattern matches",
            len(ours) > 30 and not [k for k in ours if re.search(library, k)],
            (library, [k for k in ours if re.search(library, k)], len(ours)))
    timed = runs_of("replica times on a GPU")
    c.check("sanitize: the case that compares the GPU's times runs under memcheck only",
            len(timed) == 1 and "--tool memcheck" in timed[0], timed)
    out2 = os.path.join(tmp, "out-sanitize-again")
    p, summary, _ = verify(["sanitize"], out2)
    c.check("sanitize again: the earlier call's verdicts, not new runs",
            f"{runs} of {runs} compute-sanitizer runs clean, 0 dirty, 0 unfinished (time limit); {runs} verdicts from an "
            "earlier call" in summary, summary)

    # ---- clean verdicts recorded by sources (tools/gpu/sanitized.txt) are taken on a fresh machine;
    # a changed source runs again
    record = os.path.join(out, "sanitized.txt")
    lines = open(record).read().splitlines() if os.path.exists(record) else []
    c.check("sanitize: each clean run's key in $OUT/sanitized.txt",
            len(lines) == runs and all(re.match(r"^[0-9a-f]{40} [a-z-]+ \S", line) for line in lines), lines[:3])
    shutil.rmtree(done)
    open(started, "w").close()
    p, summary, _ = verify(["sanitize"], os.path.join(tmp, "out-recorded"), settings={"DP_SANITIZE_RECORDED": record})
    c.check("sanitize on a fresh machine: every verdict recorded at these sources taken, nothing run",
            f"{runs} of {runs} compute-sanitizer runs clean" in summary and f"{runs} recorded at these sources" in summary
            and sum(line.startswith("run ") for line in open(started).read().splitlines()) <= 1, summary)  # the probe
    os.makedirs(os.path.join(tree, "engine"))
    with open(os.path.join(tree, "engine", "changed.cpp"), "w") as f:
        f.write("// a change to the library\n")
    shutil.rmtree(done)
    open(started, "w").close()
    p, summary, _ = verify(["sanitize"], os.path.join(tmp, "out-changed"),
                           settings={"DP_SANITIZE_RECORDED": record, "DP_SANITIZE_MATCH": "reported once"})
    c.check("sanitize after a change to the sources: run again, no recorded verdict taken",
            "0 recorded at these sources" in summary and any(line.startswith("run ") for line in open(started).read().splitlines()),
            summary)
    shutil.rmtree(os.path.join(tree, "engine"))

    # ---- more than 8 files under $OUT: all but the summary packed into logs.tar.gz
    packed_out = os.path.join(tmp, "out-packed")
    os.makedirs(packed_out)
    for k in range(9):
        open(os.path.join(packed_out, f"extra{k}.log"), "w").write("x\n")
    p, summary, _ = verify(["probe"], packed_out, settings={"DP_PACK_LOGS": "1"})
    packed = subprocess.run(["tar", "-tzf", os.path.join(packed_out, "logs.tar.gz")], capture_output=True, text=True).stdout.split()
    c.check("more than 8 files: all but summary.txt packed into logs.tar.gz",
            sorted(os.listdir(packed_out)) == ["logs.tar.gz", "summary.txt"] and len(packed) == 10 and "probe.log" in packed,
            (os.listdir(packed_out), packed))

    # ---- record_run.py: what came back becomes README's GPU row, a RESULTS.md section and
    # sanitized.txt's new keys (in a scratch root holding copies of the three files)
    root = os.path.join(tmp, "record-root")
    for rel in ("README.md", os.path.join("tools", "bench", "RESULTS.md"), os.path.join("tools", "gpu", "sanitized.txt")):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), os.path.join(root, rel))
    came = os.path.join(tmp, "came-back")
    os.makedirs(came)
    key = "a" * 40
    with open(os.path.join(came, "summary.txt"), "w") as f:
        f.write("PASS probe: NVIDIA H200, 580.159.04, 143771 MiB, 0 MiB, 1980 MHz; runtime: Firecracker ; x86-64-v3 "
                "flags: avx2 fma ; 0 wheel(s) missing; no mpirun\n"
                "PASS build: tools/gpu/build.sh in 3 s: prebuilt binaries used\n"
                "PASS tests: 53 of 53 GPU cases pass, 0 fail, 0 not run, in 80 s (slowest 9 s: x)\n"
                "FAIL sanitize (exit 1): 90 of 91 compute-sanitizer runs clean, 1 dirty\n")
    with open(os.path.join(came, "capabilities.md"), "w") as f:
        f.write("### plan\n\n| run | device |\n|---|---|\n| --model mlp | 0 |\n\nPASS plan: all equal\n")
    with open(os.path.join(came, "sanitized.txt"), "w") as f:
        f.write(f"{key} memcheck tests/dp_gpu_tests -tc=one\n{'b' * 40} racecheck dp train --model mlp\n")
    with tarfile.open(os.path.join(came, "logs.tar.gz"), "w:gz") as tar:  # the probe's log, packed
        data = b"== nvcc\nCuda compilation tools, release 13.0, V13.0.88\n"
        info = tarfile.TarInfo("probe.log")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with open(os.path.join(root, "tools", "gpu", "sanitized.txt"), "a") as f:
        f.write(f"{key} memcheck tests/dp_gpu_tests -tc=one\n")
    record = [sys.executable, os.path.join(ROOT, "tools", "gpu", "record_run.py"), came, "--date", "2026-12-01",
              "--root", root]
    p = subprocess.run(record, capture_output=True, text=True)
    readme = open(os.path.join(root, "README.md")).read()
    table = readme[readme.index("| GPU | driver, CUDA |"):].split("\n\n")[0].splitlines()
    c.check("record_run: the run's row on top of README's GPU table, three rows kept", p.returncode == 0 and
            table[2].startswith("| H200 | 580.159.04, 13.0 | 2026-12-01 | tests: 53 of 53 GPU cases pass, 0 fail, 0 not run |")
            and len(table) <= 5 and "sanitize" not in table[2], (p.stderr, table))
    results = open(os.path.join(root, "tools", "bench", "RESULTS.md")).read()
    c.check("record_run: a RESULTS.md section with every stage and the capabilities tables",
            "## 2026-12-01 — GPU run (H200)" in results and "| sanitize | FAIL | 90 of 91" in results
            and "| --model mlp | 0 |" in results.split("## 2026-12-01")[1], results[-1500:])
    sanitized = open(os.path.join(root, "tools", "gpu", "sanitized.txt")).read().splitlines()
    c.check("record_run: only the new clean verdicts appended to sanitized.txt",
            sanitized.count(f"{key} memcheck tests/dp_gpu_tests -tc=one") == 1 and sanitized[-1].startswith("b" * 40),
            sanitized[-3:])
    # the fixtures that came back (packed) land in tests/fixtures/gpu-memprof, each with the run's date
    first = {"command": "memprof", "devices": "cuda:0x4", "flags": ["--model", "mlp", "--batch", "16"],
             "report": {"devices": [{"index": 0, "peak_bytes": 1}]}}
    with tarfile.open(os.path.join(came, "logs.tar.gz"), "w:gz") as tar:
        for name, data in (("probe.log", b"== nvcc\nCuda compilation tools, release 13.0, V13.0.88\n"),
                           ("fixtures/memprof-model-mlp-batch-16.json", json.dumps(first).encode()),
                           ("fixtures/net.json", b'{"graph": []}')):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    p = subprocess.run(record, capture_output=True, text=True)
    landed = os.path.join(root, "tests", "fixtures", "gpu-memprof")
    got = json.load(open(os.path.join(landed, "memprof-model-mlp-batch-16.json"))) if os.path.isdir(landed) else {}
    c.check("record_run: the fixtures that came back land in tests/fixtures/gpu-memprof with the run's date",
            p.returncode == 0 and sorted(os.listdir(landed)) == ["memprof-model-mlp-batch-16.json", "net.json"]
            and got.get("date") == "2026-12-01" and got.get("report") == first.get("report"), (p.stdout, p.stderr))
    os.remove(os.path.join(came, "summary.txt"))
    p = subprocess.run(record, capture_output=True, text=True)
    c.check("record_run: no summary.txt is an error naming it", p.returncode != 0 and "no summary.txt" in p.stderr,
            p.stderr)

    # ---- a GPU compute-sanitizer cannot instrument: one try, then a failed stage saying why
    shutil.rmtree(done)
    open(started, "w").close()
    p, summary, secs = verify(["sanitize"], os.path.join(tmp, "out-unsupported"), unsupported=True)
    c.check("sanitizer refused: the stage fails in one try, saying why",
            "FAIL sanitize (exit 1): not run: compute-sanitizer cannot instrument this GPU here (Error: Device not "
            "supported; kernel " in summary and sum(line.startswith("run ") for line in open(started).read().splitlines()) == 1
            and p.returncode == 1,
            (summary, open(started).read(), p.stderr[-1000:]))

    log = open(os.path.join(out, "sanitize.log")).read() if os.path.exists(os.path.join(out, "sanitize.log")) else ""
    c.check("sanitize: names the compute-sanitizer, and runs initcheck as it comes when its help lists no option for "
            "Hopper's stores",
            "== this compute-sanitizer: Version 2099.1.0" in log and "== initcheck as it comes" in log
            and not any("--check-bulk-copy" in line for line in starts), log[:500])

    # ---- a dirty run: its findings counted by kind and place, every one (not only those printed)
    shutil.rmtree(done)
    out = os.path.join(tmp, "out-dirty")
    open(started, "w").close()
    p, summary, _ = verify(["sanitize"], out, findings="*--tool initcheck*build-gpu/dp train *--model mlp --cuda-graphs on",
                           options=True)
    starts = [line for line in open(started).read().splitlines() if line.startswith("run ")]
    checks = [line for line in starts if "--tool initcheck" in line]
    c.check("sanitize: initcheck asks for bulk copies and warpgroup MMA where the help lists them (tried on one "
            "case first), the other tools do not",
            len(checks) > 10 and all("--check-bulk-copy yes --check-warpgroup-mma yes" in line for line in checks)
            and not any("--check-bulk-copy" in line for line in starts if line not in checks), checks[:3])
    findings = os.path.join(out, "sanitize-findings.txt.gz")
    text = gzip.open(findings, "rt").read() if os.path.exists(findings) else ""
    c.check("sanitize: a dirty run's output comes back whole in one file, under its command",
            text.startswith("== compute-sanitizer --tool initcheck build-gpu/dp train") and "--model mlp --cuda-graphs on" in text
            and text.count("Uninitialized __global__ memory read") == 2 and text.count("== compute-sanitizer") == 1,
            text[:800])
    log = open(os.path.join(out, "sanitize.log")).read() if os.path.exists(os.path.join(out, "sanitize.log")) else ""
    c.check("sanitize: a dirty run counted as dirty", p.returncode == 1 and " 1 dirty, 0 unfinished" in summary, summary)
    c.check("sanitize: a dirty initcheck run is run again with every allocation written first, and says what that found",
            "-- again with DP_POISON_ALLOCATIONS=1 (every allocation written first): dirty (exit 99), every finding:\n"
            "      2  Uninitialized __global__ memory read of size 4 bytes" in log
            and sum("--tool initcheck" in line and "--model mlp --cuda-graphs on" in line for line in
                    open(started).read().splitlines()) == 2, log[-1500:])
    shutil.rmtree(done)
    p, summary, _ = verify(["sanitize"], os.path.join(tmp, "out-dirty-poisoned"),
                           findings="*--tool initcheck*build-gpu/dp train *--model mlp --cuda-graphs on", clean_poisoned=True)
    log2 = open(os.path.join(tmp, "out-dirty-poisoned", "sanitize.log")).read()
    c.check("sanitize: clean when every allocation is written first: said so, and still counted dirty",
            "-- again with DP_POISON_ALLOCATIONS=1 (every allocation written first): clean\ndirty\n" in log2
            and " 1 dirty, 0 unfinished" in summary, log2[-800:])
    def racecheck_failing_itself(name, internal_ours, internal_none=False):
        """The sanitize stage with racecheck failing itself on one step case (and, with internal_ours,
        on dp's kernels only too; with internal_none, instrumenting no kernel too): its exit, summary,
        log, and every racecheck start of that case."""
        shutil.rmtree(done)
        open(started, "w").close()
        out = os.path.join(tmp, name)
        p, summary, _ = verify(["sanitize"], out, internal="*--tool racecheck*-tc=--recompute blocks*",
                               internal_ours=internal_ours, internal_none=internal_none)
        log = os.path.join(out, "sanitize.log")
        runs = [line for line in open(started).read().splitlines()
                if "--tool racecheck" in line and "-tc=--recompute blocks" in line]
        return p, summary, open(log).read() if os.path.exists(log) else "", runs

    # ---- racecheck failing itself: once more checking dp's kernels only, said so, still dirty
    p, summary, log3, again = racecheck_failing_itself("out-internal", False)
    c.check("sanitize: racecheck that fails itself is run again with a filter naming dp's kernels, no exclude list",
            len(again) == 2 and "--kernel-name-exclude" in again[0]
            and "--kernel-name regex=dp::cuda|2dp4cuda" in again[1] and "--kernel-name-exclude" not in again[1], again)
    c.check("sanitize: the tool's own error in the short log, the second run's verdict, the run still dirty",
            "========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception." in log3
            and "-- again checking dp's kernels only (--kernel-name regex=dp::cuda|2dp4cuda): clean\ndirty\n" in log3
            and " 1 dirty, 0 unfinished" in summary and p.returncode == 1, (summary, log3[-1500:]))
    c.check("sanitize: a racecheck clean with dp's kernels only is not run a third time",
            "instrumenting no kernel" not in log3, log3[-1500:])
    # ---- failing itself with dp's kernels only too: a third run that instruments no kernel
    p, summary, log4, again = racecheck_failing_itself("out-internal-ours", True)
    c.check("sanitize: racecheck failing itself on dp's kernels only is run a third time, instrumenting no kernel",
            len(again) == 3 and "--kernel-name regex=dp::cuda|2dp4cuda" in again[1]
            and "--kernel-name regex=^instrument-no-kernel$" in again[2] and "--kernel-name-exclude" not in again[2], again)
    c.check("sanitize: both reruns' verdicts in order, the run still dirty",
            "-- again checking dp's kernels only (--kernel-name regex=dp::cuda|2dp4cuda): dirty (exit 99)" in log4
            and "-- again instrumenting no kernel (--kernel-name regex=^instrument-no-kernel$): clean\ndirty\n" in log4
            and log4.index("checking dp's kernels only") < log4.index("instrumenting no kernel")
            and " 1 dirty, 0 unfinished" in summary and p.returncode == 1, (summary, log4[-2000:]))
    # ---- failing itself even instrumenting no kernel: the tool's failure, its own verdict, the stage failed
    p, summary, log5, again = racecheck_failing_itself("out-internal-none", True, True)
    c.check("sanitize: racecheck failing itself instrumenting no kernel is the tool's failure: neither clean nor dirty",
            len(again) == 3
            and "-- again instrumenting no kernel (--kernel-name regex=^instrument-no-kernel$): dirty (exit 99)" in log5
            and "-- racecheck fails itself instrumenting no kernel: the tool's failure, not dp's\ntool-failed\n" in log5
            and " 0 dirty, 0 unfinished (time limit), 1 failed by racecheck itself (instrumenting no kernel);" in summary
            and p.returncode == 1, (summary, log5[-2000:]))
    # ---- DP_PROFILE_SPECS: the profile's specs named by the caller (here one it has no part for)
    p, summary, _ = verify(["profile"], os.path.join(tmp, "out-profile"), settings={"DP_PROFILE_SPECS": "nosuch:mlp:1024"})
    c.check("DP_PROFILE_SPECS: profile.sh runs the specs it names, and the summary says which",
            "FAIL profile (exit 1): tools/gpu/profile.sh nosuch:mlp:1024 in " in summary, summary)
    # ---- DP_SANITIZE_MATCH: only the runs it matches
    shutil.rmtree(done)
    open(started, "w").close()
    p, summary, _ = verify(["sanitize"], os.path.join(tmp, "out-match"),
                           settings={"DP_SANITIZE_MATCH": "^racecheck-ours .*bf16|^memcheck .*sibling's cache"})
    chosen = [line for line in open(started).read().splitlines() if line.startswith("run ") and "-tc=" in line]
    bf16 = [n for n in names if "cuda:0x" in n and "bf16" in n]
    races = [line for line in chosen if "--tool racecheck" in line]
    alone = [line for line in chosen if "sibling's cache" in line]
    c.check("DP_SANITIZE_MATCH: only the runs it matches, the cases run alone included",
            len(bf16) >= 2 and len(races) == len(bf16)
            and all("--kernel-name-exclude" in line and "bf16" in line for line in races)
            and len(alone) == 1 and "--tool memcheck" in alone[0]
            and f"{len(bf16) + 1} of {len(bf16) + 1} compute-sanitizer runs clean" in summary, (chosen, summary))
    def outside_dp_cuda(path):  # the kernels of a file not between its namespace dp::cuda's opening and close
        text = open(path).read()
        opens, closes = text.find("namespace dp::cuda"), text.rfind("}  // namespace dp::cuda")
        return [m.start() for m in re.finditer(r"__global__", text) if not opens < m.start() < closes]
    kernel_files = [path for path in glob.glob(os.path.join(ROOT, "kernels", "**", "*.cu*"), recursive=True)
                    + glob.glob(os.path.join(ROOT, "engine", "**", "*.cu*"), recursive=True)
                    if "__global__" in open(path).read()]
    c.check("sanitize: every kernel of dp's is inside namespace dp::cuda (what DP_KERNELS names)",
            len(kernel_files) > 10 and not [path for path in kernel_files if outside_dp_cuda(path)],
            [path for path in kernel_files if outside_dp_cuda(path)])
    c.check("sanitize: a dirty run's findings counted by kind and where",
            "-- every finding, counted by kind and where:\n"
            "      2  Uninitialized __global__ memory read of size 4 bytes  |  void k<float>(float *)\n"
            "      1  Host API memory access error at host access to X of size 512 bytes  |  cuGraphLaunch from "
            "dp::DataParallel::step\n" in log, log[-1500:])

    # ---- --within: slow runs cut, counted unfinished, the call inside its time
    shutil.rmtree(done)
    out = os.path.join(tmp, "out-deadline")
    p, summary, secs = verify(["--within", "62", "sanitize"], out, seconds=4)
    c.check("--within: some runs finished, the rest unfinished, none dirty",
            "FAIL sanitize" in summary and " 0 dirty" in summary and " 0 unfinished" not in summary
            and " 0 of " not in summary, summary)
    c.check("--within: the call ends inside its time", secs < 62, secs)

    # ---- unit with prebuilt binaries (no ctest files): each unit case in its own process, counted
    out = os.path.join(tmp, "out-unit")
    p, summary, _ = verify(["unit"], out, settings={"DP_UNIT_CASES": "reduce_add|scatter", "DP_UNIT_SUITES": ""})
    log = open(os.path.join(out, "unit.log")).read() if os.path.exists(os.path.join(out, "unit.log")) else ""
    ran = [line for line in log.splitlines() if line.startswith("pass: unit ")]
    c.check("unit (prebuilt): the chosen unit cases, each in its own process, all pass",
            p.returncode == 0 and len(ran) >= 2 and f"PASS unit: {len(ran)} of {len(ran)} pass ({len(ran)} unit cases"
            in summary, summary + log[-2000:])

    # ---- capabilities: on host devices the plan equals memprof and ZeRO's stages agree with host:4 and
    # allreduce; a missing model file fails its part naming the kit; the stage without a GPU fails
    # naming what failed
    fixtures = os.path.join(tmp, "fixtures")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu", "capabilities.py"), "--dp", dp, "--gpu",
                        "host:1", "--multi", "host:4", "--pair", "host:2", "--small", "--only", "plan,zero,file",
                        "--model-file", os.path.join(tmp, "missing.json"), "--fixtures", fixtures],
                       capture_output=True, text=True, timeout=600)
    c.check("capabilities on host devices: the plan is memprof's (1.000x), ZeRO within tolerance",
            "PASS plan: " in p.stdout and "FAIL plan" not in p.stdout and "PASS zero: " in p.stdout
            and p.stdout.count("| equal |") >= 24 and p.stdout.count("| 1.000x |") >= 24
            and p.stdout.count("within tolerance") == 6, p.stdout[-3000:] + p.stderr[-1000:])
    written = sorted(os.listdir(fixtures)) if os.path.isdir(fixtures) else []
    first = json.load(open(os.path.join(fixtures, written[0]))) if written else {}
    c.check("capabilities --fixtures: each memprof report written with its flags and devices",
            len(written) == 6 and all(n.startswith("memprof-") for n in written) and first.get("devices") == "host:4"
            and "--batch" in first.get("flags", []) and first.get("report", {}).get("devices"), (written, list(first)))
    c.check("capabilities: a missing model file fails its part, naming the kit", p.returncode == 1 and
            "FAIL file: " in p.stdout and "tools/gpu/kit.sh" in p.stdout, p.stdout[-1000:])
    # the file part's one update with a transformer file (nanoGPT's model.py, tiny): the host pair
    # against host:2 is the same computation, so its row is within tolerance
    gpt_file = os.path.join(tmp, "nanogpt.json")
    export_nanogpt(gpt_file, 16)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu", "capabilities.py"), "--dp", dp, "--gpu",
                        "host:1", "--multi", "host:4", "--pair", "host:2", "--small", "--only", "file",
                        "--model-file", os.path.join(tmp, "missing.json"), "--transformer-file", gpt_file],
                       capture_output=True, text=True, timeout=300)
    row = next((line for line in p.stdout.splitlines() if line.startswith("| nanogpt | 4 ")), "")
    c.check("capabilities file: nanoGPT's model file updated once on the pair, within its float32 spread, "
            "while the missing resnet50 fails the part", row.endswith("| within |") and "FAIL file: " in p.stdout
            and "missing.json is missing" in p.stdout, p.stdout[-2000:] + p.stderr[-1000:])
    out = os.path.join(tmp, "out-capabilities")
    p, summary, _ = verify(["capabilities"], out, settings={"DP_CAPABILITIES": "plan"})
    c.check("capabilities without a GPU: the stage fails, naming dp memprof's failure", p.returncode == 1 and
            "FAIL capabilities (exit 1): " in summary and "FAIL plan: " in summary and "dp memprof exit" in summary,
            summary + p.stderr[-1000:])

    # ---- a prime still running when the GPU cases start: they wait for it (a case must have the GPU
    # to itself), and stop it after DP_PRIME_WAIT seconds; a stand-in python3 whose prime never ends
    slow = os.path.join(tmp, "slow-prime")
    os.makedirs(slow)
    with open(os.path.join(slow, "python3"), "w") as f:
        f.write('#!/bin/sh\ncase "$*" in *--prime*) exec sleep 600;; esac\nexec /usr/bin/python3 "$@"\n')
    os.chmod(os.path.join(slow, "python3"), 0o755)
    out = os.path.join(tmp, "out-prime-first")
    p, summary, secs = verify(["prime", "tests"], out, settings={"DP_PRIME_WAIT": "2"}, path_first=slow)
    prime_log = open(os.path.join(out, "prime.log")).read() if os.path.exists(os.path.join(out, "prime.log")) else ""
    c.check("prime before tests: the cases wait for it, then stop it, saying why",
            "stopped after waiting 2 s: the GPU cases have the GPU to themselves" in prime_log
            and "PASS prime: " in summary and "FAIL tests (exit " in summary and secs < 200, (summary, prime_log))

    # ---- mpi: the MPI suite's verdict in the summary, its own skip (no MPI in this build) a SKIP line;
    # stand-ins for mpirun and for python3 running the suite
    mpi_bin = os.path.join(tmp, "mpi-stand-ins")
    os.makedirs(mpi_bin)
    with open(os.path.join(mpi_bin, "python3"), "w") as f:
        f.write('#!/bin/sh\ncase "$*" in *tests/cli/test_mpi.py*build-gpu/dp*) echo "$FAKE_MPI_SAYS"; exit "$FAKE_MPI_EXIT";; esac\n'
                'exec /usr/bin/python3 "$@"\n')
    with open(os.path.join(mpi_bin, "mpirun"), "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    for name in ("python3", "mpirun"):
        os.chmod(os.path.join(mpi_bin, name), 0o755)
    p, summary, _ = verify(["mpi"], os.path.join(tmp, "out-mpi"), path_first=mpi_bin,
                           settings={"FAKE_MPI_SAYS": "3 passed, 0 failed", "FAKE_MPI_EXIT": "0"})
    c.check("mpi: the suite's count in the summary", p.returncode == 0
            and re.search(r"^PASS mpi: tests/cli/test_mpi.py in [0-9]+ s: 3 passed, 0 failed$", summary, re.M), summary)
    p, summary, _ = verify(["mpi"], os.path.join(tmp, "out-mpi-skip"), path_first=mpi_bin,
                           settings={"FAKE_MPI_SAYS": "SKIP: this dp was built without MPI", "FAKE_MPI_EXIT": "77"})
    c.check("mpi: the suite skipping itself is a SKIP line saying why", p.returncode == 0
            and "SKIP mpi: SKIP: this dp was built without MPI" in summary, summary)
    p, summary, _ = verify(["mpi"], os.path.join(tmp, "out-mpi-fail"), path_first=mpi_bin,
                           settings={"FAKE_MPI_SAYS": "2 passed, 1 failed", "FAKE_MPI_EXIT": "1"})
    c.check("mpi: a failed suite fails the stage", p.returncode == 1 and "FAIL mpi (exit 1): " in summary
            and "2 passed, 1 failed" in summary, summary)

    # ---- too little time for a stage; a bad stage
    p, summary, _ = verify(["--within", "20", "tests"], os.path.join(tmp, "out-skip"))
    c.check("a stage with too little time is skipped, saying so", "SKIP tests: " in summary and p.returncode == 0,
            summary)
    p, _, _ = verify(["no-such-stage"], os.path.join(tmp, "out-bad"))
    c.check("an unknown stage is an error", p.returncode == 2 and "unknown stage 'no-such-stage'" in p.stderr, p.stderr)
    p, _, _ = verify(["--within", "soon"], os.path.join(tmp, "out-bad2"))
    c.check("--within without seconds is an error", p.returncode == 2 and "--within takes seconds" in p.stderr,
            p.stderr)

    # ---- the profile's table of kernel times, from Nsight Compute's CSV in either unit spelling
    header = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
    rows = [("0", "gemm", "ns", "2,000"), ("1", "relu", "usecond", "1.5"), ("2", "gemm", "ns", "4,000")]

    def kernel_times(rows, steps="2"):
        path = os.path.join(tmp, "ncu.csv")
        with open(path, "w") as f:
            f.write("==PROF== a note ncu prints unquoted\n" + header)
            f.writelines(f'"{i}","{k}","gpu__time_duration.sum","{u}","{v}"\n' for i, k, u, v in rows)
        return subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu", "kernel_times.py"), path, steps],
                              capture_output=True, text=True)

    p = kernel_times(rows)
    c.check("kernel_times: ns and usecond rows summed per kernel, per step, the largest first",
            p.returncode == 0 and p.stdout.splitlines()[:3] == [
                "kernel time per step: 0.004 ms in 2 kernels", "    0.003 ms    1.0x  gemm", "    0.001 ms    0.5x  relu"],
            p.stdout + p.stderr)
    # ---- the profile's phases side by side, from dp train's --metrics (host devices here)
    runs = []
    for devices in ("host:1", "host:2"):
        metrics = os.path.join(tmp, f"phases-{devices}.jsonl")
        subprocess.run([dp, "train", "--model", "mlp", "--devices", devices, "--batch", "16", "--steps", "4",
                        "--generated-size", "64", "--metrics", metrics], capture_output=True)
        runs.append(f"{devices}={metrics}")
    table = os.path.join(ROOT, "tools", "gpu", "phase_table.py")
    p = subprocess.run([sys.executable, table, "2"] + runs, capture_output=True, text=True)
    lines = p.stdout.splitlines()
    c.check("phase_table: a row per phase in the step's order, then the step and samples/s, a column per run",
            p.returncode == 0 and lines[0] == "| phase (ms per step, steps 2 on) | host:1 | host:2 |"
            and [l.split(" | ")[0][2:] for l in lines[2:]] == ["load", "scatter", "replicate", "forward", "gather",
                                                               "loss", "backward", "reduce", "update", "step",
                                                               "samples/s"]
            and all(l.count("|") == 4 for l in lines), p.stdout + p.stderr)
    p = subprocess.run([sys.executable, table, "--step-time", "2", runs[0].split("=", 1)[1]], capture_output=True,
                       text=True)
    step_row = next((l for l in lines if l.startswith("| step |")), "")
    c.check("phase_table --step-time: the table's step time for that run, alone",
            p.returncode == 0 and p.stdout.strip().endswith(" ms per step (steps 2 on)")
            and step_row.split(" | ")[1] == p.stdout.split()[0], p.stdout + p.stderr + step_row)
    p = subprocess.run([sys.executable, table, "9"] + runs, capture_output=True, text=True)
    c.check("phase_table: no steps that late is an error naming the file", p.returncode != 0 and "no steps from 9 on"
            in p.stderr, p.stdout + p.stderr)
    p = kernel_times(rows + [("3", "copy", "furlong", "1")])
    c.check("kernel_times: an unknown unit is an error naming it", p.returncode != 0 and "unknown unit 'furlong'"
            in p.stderr, p.stdout + p.stderr)

# ---- the one-update comparison (compare_runs.update_drift) and the perturbed start it calibrates with
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu"))
import compare_runs  # noqa: E402
import weights_file  # noqa: E402


def write_safetensors(path, tensors):
    """{name: (dtype, bytes)} as a safetensors file."""
    header, body = {}, b""
    for name, (dtype, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": [len(data) // 4 if dtype == "F32" else len(data) // 8],
                        "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + body)


with tempfile.TemporaryDirectory() as tmp:
    def f32(*v):
        return ("F32", struct.pack(f"<{len(v)}f", *v))

    def st(name, w, b, count=1):
        path = os.path.join(tmp, name)
        write_safetensors(path, {"w": f32(*w), "b": f32(*b), "n": ("I64", struct.pack("<q", count))})
        return path

    start = st("a0", [1.0, 2.0, 3.0], [0.5])
    a1 = st("a1", [0.9, 2.0, 3.1], [0.25])
    same = st("b1", [0.9, 2.0, 3.1], [0.25])
    # b's update of w is (-0.1, 0, 0.2) against a's (-0.1, 0, 0.1): |0, 0, 0.1| / |0.1, 0, 0.1| = 0.707
    off = st("c1", [0.9, 2.0, 3.2], [0.25])
    counted = st("d1", [0.9, 2.0, 3.1], [0.25], count=2)
    c.check("update_drift: the same update is 0", compare_runs.update_drift(a1, start, same, start)[0] == 0.0)
    worst = compare_runs.update_drift(a1, start, off, start)
    c.check("update_drift: each tensor against its own update, in the norm", worst[1] == "w"
            and abs(worst[0] - 0.1 / (0.02 ** 0.5)) < 1e-5, worst)  # float32's 0.9, 3.1 and 3.2
    c.check("update_drift: an int64 counter is compared exactly",
            compare_runs.update_drift(a1, start, counted, start) == "n differs (compared exactly)")
    moved = os.path.join(tmp, "moved")
    weights_file.perturbed_copy(start, moved, 1e-7, seed=3)
    old_w, new_w = weights_file.read(start)[0]["w"], weights_file.read(moved)[0]["w"]
    c.check("perturbed_copy: every float moves by at most about 1e-7 relative, counters stay",
            all(abs(x - y) <= 2.4e-7 * abs(x) for x, y in zip(old_w, new_w)) and list(old_w) != list(new_w)
            and weights_file.read(moved)[1] == weights_file.read(start)[1], (list(old_w), list(new_w)))

# ---- the bench's plumbing on a CPU: a budgeted table 1 row through PyTorch's one server; the prime
# with nothing to compile
bench = [sys.executable, os.path.join(ROOT, "tools", "bench", "bench_gpu.py"), "--dp", dp, "--gpu", "host:1", "--multi",
         "host:2", "--torch-device", "cpu", "--repeats", "2", "--models", "mlp", "--only", "1"]
p = subprocess.run(bench, capture_output=True, text=True, timeout=300)
row = next((line for line in p.stdout.splitlines() if line.startswith("| mlp | 128 |")), "")
cells = [x.strip() for x in row.strip("|").split("|")]
c.check("bench: table 1's row within its budget, dp and PyTorch timed, its steps, repeats and budget stated",
        p.returncode == 0 and len(cells) == 12 and all(re.fullmatch(r"[0-9]+", x) for x in cells[2:5])
        and cells[8:11] == ["200", "2", "20"] and int(cells[11]) <= 22, p.stdout[-2000:] + p.stderr[-1000:])
# table 9 at --small's sizes: dp's GPT and nanoGPT's file in the same interleaved repeats as PyTorch's
# GPT, each cell timed; the resnet50 row names the kit when its file is missing
with tempfile.TemporaryDirectory() as tmp:
    gpt_file = os.path.join(tmp, "nanogpt-tiny.json")
    export_nanogpt(gpt_file, 16)
    p = subprocess.run(bench[:-2] + ["--only", "9", "--small", "--compile", "none", "--real-model-file",
                                     os.path.join(tmp, "missing.json"), "--real-gpt-file", gpt_file],
                       capture_output=True, text=True, timeout=300)
rows = [[x.strip() for x in line.strip("|").split("|")] for line in p.stdout.splitlines()
        if line.startswith("| tiny GPT |")]
c.check("bench table 9 (--small): dp's GPT, PyTorch's and nanoGPT's file timed in each precision's row, "
        "the file's ratios given; the 16-bit row's cuBLASLt and fused-attention runs timed beside them",
        p.returncode == 0 and len(rows) == 2 and all(len(r) == 22 and re.fullmatch(r"[0-9]+", r[3])
                                                     and re.fullmatch(r"[0-9]+", r[4]) and re.fullmatch(r"[0-9]+", r[11])
                                                     and r[12].endswith("x") and r[13].endswith("x") for r in rows)
        and rows[0][14:16] == ["n/a", "-"] and re.fullmatch(r"[0-9]+", rows[1][14]) and rows[1][15].endswith("x")
        and rows[0][16:18] == ["n/a", "-"] and re.fullmatch(r"[0-9]+", rows[1][16]) and rows[1][17].endswith("x")
        and "| resnet50 | | | not run: " in p.stdout and "tools/gpu/kit.sh" in p.stdout
        and re.search(r"^\| zero2 \| [0-9]+ \| [0-9.]+x \|", p.stdout, re.M), p.stdout[-3000:] + p.stderr[-1000:])
p = subprocess.run(bench[:-2] + ["--prime", "--compile", "none"], capture_output=True, text=True, timeout=60)
c.check("bench --prime with nothing to compile: compiles nothing",
        p.returncode == 0 and not any(line.startswith("prime ") for line in p.stdout.splitlines()), p.stdout + p.stderr)

c.finish()
