#!/usr/bin/env python3
"""The GPU check's one command (one script that builds, checks and times in one run): run on the GPU
machine with .gpu-kit beside the tree (tools/gpu/kit.sh and tools/gpu/prebuild.sh make it on the
build machine; tools/gpu/README.md has the procedure), e.g.

    tools/gpu/verify.py --within 520 probe build tests equal sanitize

--within S: everything ends S seconds after the start. Each stage gets what is left (a stage with too
little left is skipped, saying so), each command in it a time limit from the same clock, so a
cut-short run still keeps every log and a summary; without it nothing is limited but the stages' own
limits. Stages run in the order given, each a function below (stage_<name>) writing $OUT/<stage>.log;
with more than 8 files there, all but summary.txt are packed into logs.tar.gz at the end, since at
most 8 files come back:

  probe         the machine: GPU, driver, nvcc, CPU flags, cuDNN, NCCL and mpirun found where
  build         tools/gpu/build.sh: the binaries prebuilt here if they fit, else a build from source
  tests         every GPU test case in its own process, one at a time, with a time limit and
                DP_REQUIRE_GPU=1 (one sticky CUDA error cannot hide the cases after it, a hang is
                named, a filter matching nothing and no GPU are failures)
  poisoned      the same with DP_POISON_ALLOCATIONS=1: every allocation filled with NaN first, so a
                result that depends on memory nothing wrote fails its comparison
  unit          every other test on that machine: ctest -LE gpu after a build from source; with the
                prebuilt binaries the same run by hand (each unit case in its own process, the CLI
                suites), less the PyTorch cross-checks and the MPI suite
  equal         50 steps on cuda:0x4 against host:4, losses and weights (tools/gpu/compare_runs.py,
                tolerance calibrated by host:4 with 1 and 2 threads per device); one epoch of the
                convnet on MNIST (.gpu-kit/mnist, carried) on cuda:0x2 against host:2, test
                accuracy; --device-memory on cuda:0: exit 3 naming remedies
  sanitize      compute-sanitizer memcheck, racecheck, synccheck, initcheck on each GPU test case and
                on dp train --devices cuda:0x4 --steps 3 runs, several processes at once on the one
                GPU, the most telling first (stage_sanitize says the order). DP_SANITIZE_PART=slow|rest
                and DP_SANITIZE_MATCH=<regex> choose runs
  capabilities  tools/gpu/capabilities.py: dp plan on meta devices against dp memprof on cuda:0x4
                (every memprof report written to $OUT/fixtures for tests/fixtures), ZeRO's stages on
                cuda:0x4 against host:4 and --sync allreduce, one update of the model files
                .gpu-kit/resnet50.json and .gpu-kit/nanogpt.json on cuda:0x2 against host:2 within
                the float32 spread, dp's device memory against PyTorch's; DP_CAPABILITIES (a comma
                list) runs some of them (capabilities.md)
  export        tools/export_model.py under this machine's PyTorch (2.x; the CPU machines have 1.13):
                tests/torch/nanogpt_export_check.py and, where torchvision is there,
                tests/torch/zoo_export_check.py (every torchvision family exported and planned)
  prime         torch.compile's cache for the bench's table 9 filled in the background (prime.log):
                put it before stages that time nothing; the bench waits for it (DP_PRIME_WAIT seconds
                at most, 90) and stops it before it times anything
  mpi           tests/cli/test_mpi.py (its GPU case: one rank through NCCL) where mpirun is there and
                dp was built with MPI; else skipped, saying which is missing
  profile       tools/gpu/profile.sh: each kernel's time per step, dp (ncu) against PyTorch, and dp's
                wall time per --cudnn choice; each phase's time on cuda:0x1 against cuda:0x4; the
                convnet's kernel time per step on cuda:0x4; DP_PROFILE_SPECS names other specs
  bench         tools/bench/bench_gpu.py $DP_BENCH_ARGS (Markdown for RESULTS.md), for at most
                DP_BENCH_SECONDS (the tables it finished come back)

Every stage runs even when one before it failed (except after a failed build); summary.txt gets one
line per stage (PASS, FAIL or SKIP) and is printed last. Exit status: the number of failed stages
(2 for a bad command line). Standard library only: the GPU machine has no Debian packages.
"""
import concurrent.futures
import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

from verify_call import (DP, GPU_TESTS, UNIT_TESTS, Clock, Verify, capture, case_filter, doctest_cases, ran_nothing, read,
                         run, seconds_since, stop_group, tail)
from verify_sanitize import stage_sanitize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The least time each stage is started with.
NEEDS = {"tests": 60, "poisoned": 60, "unit": 60, "sanitize": 60, "equal": 60, "capabilities": 60, "mpi": 30,
         "profile": 60, "bench": 60, "prime": 120, "export": 60}


# ---- probe and build

def stage_probe(v):
    """The machine, in probe.log; its summary line is what record_run.py reads the GPU from."""
    kernel = os.uname().release
    # KINDS.md: on gVisor (kernel 4.4.0) compute-sanitizer and ncu cannot see the GPU; on Firecracker they can
    if kernel == "4.4.0":
        runtime = f"runtime: gVisor (kernel {kernel}): no compute-sanitizer, no ncu counters"
    elif "-fc-" in kernel:
        runtime = f"runtime: Firecracker (kernel {kernel})"
    else:
        runtime = f"runtime: unknown (kernel {kernel})"
    cpuinfo = read("/proc/cpuinfo")
    flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), []))
    model = next((line for line in cpuinfo.splitlines() if line.startswith("model name")), "model name: ?")
    v3 = "x86-64-v3 flags: " + "".join(f + " " for f in ("avx2", "fma", "bmi2", "f16c", "movbe", "avx512f") if f in flags)
    gpu = capture(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used,clocks.sm",
                   "--format=csv,noheader"]).strip()
    libraries = []
    for lib in ("cudart", "cublas", "cudnn", "nccl"):
        pattern = f"/usr/local/cuda/lib64/lib{lib}.so.[0-9]*"
        libraries += sorted(glob.glob(pattern)) or [f"not found: {pattern}"]
    wheels = capture(["python3", "-c", """
import importlib
for n in ("nvidia.cudnn", "nvidia.nccl", "nvidia.cublas", "mpi4py", "torch"):
    try:
        m = importlib.import_module(n); print(n, getattr(m, "__version__", ""), list(getattr(m, "__path__", [""]))[:1])
    except Exception as e:
        print(n, "missing:", e)"""])
    mpirun = shutil.which("mpirun")
    mpi = [mpirun, capture([mpirun, "--version"]).split("\n")[0]] if mpirun else ["no mpirun"]
    libmpi = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libmpi.so*")) or ["no libmpi in /usr/lib/x86_64-linux-gnu"]
    with open(v.path("probe.log"), "w") as log:
        log.write(f"== GPU\n{gpu}\n== nvcc\n{tail(capture(['nvcc', '--version']), 2)}{runtime}\n"
                  f"== CPU\n{model}\n{len(os.sched_getaffinity(0))}\n{v3}\n"
                  "== CUDA's libraries\n" + "\n".join(libraries) + f"\n== wheels\n{wheels}"
                  "== MPI\n" + "\n".join(mpi + libmpi) + "\n")
    missing = sum("missing" in line for line in wheels.splitlines())
    v.note(f"PASS probe: {gpu.splitlines()[0] if gpu else '?'}; {runtime.split('(')[0]}; {v3}; {missing} wheel(s) "
           f"missing; {'mpirun there' if mpirun else 'no mpirun'}")


def stage_build(v):
    t0 = time.monotonic()
    log = v.path("build.log")
    rc = run(["tools/gpu/build.sh"], v.clock.limit(3600), out=log)
    how = next((line[:160] for line in read(log).splitlines()
                if line.startswith(("prebuilt binaries used", "built from source"))), "")
    v.result("build", rc, f"tools/gpu/build.sh in {seconds_since(t0)} s: {how}")
    if rc != 0:  # nothing after it can run
        print(tail(read(log), 30), end="")
        prime_done(v)
        sys.exit(1)


# ---- the GPU cases, one process each

def stage_tests(v):
    gpu_cases_each(v, "tests", 300, "", {})


def stage_poisoned(v):
    """The GPU cases with every allocation filled with NaN first (DP_POISON_ALLOCATIONS): a kernel whose
    result depends on memory nothing wrote fails its comparison here. Without compute-sanitizer's
    slowdown, it tells whether initcheck's reports of reads matter (RESULTS.md, 2026-11-26). Each fill
    waits for its stream, so a step that waits inside on another thread's work could hang: a shorter
    limit per case (the slowest takes 30 s unpoisoned on the H200). Left out: the case that compares
    the GPU's times for 4 and 1020 samples, which the fills' waits would flatten."""
    gpu_cases_each(v, "poisoned", 150, "*replica times on a GPU*", {"DP_POISON_ALLOCATIONS": "1"})


def gpu_cases_each(v, stage, case_limit, leave_out, env_vars):
    """Every GPU case in its own process: the stage's name (its log is $OUT/<stage>.log), each case's
    time limit in seconds, a glob of the cases to leave out ("" for none), variables to set for each."""
    t0 = time.monotonic()
    log_path = v.path(f"{stage}.log")
    passed = bad = unrun = skipped = 0
    slowest, slowest_name = -1.0, ""
    listing = capture([GPU_TESTS, "--list-test-cases", "--no-intro"])
    cases = doctest_cases(GPU_TESTS)
    with open(log_path, "w") as log:
        semicolons = [f"{k}:{line}" for k, line in enumerate(listing.splitlines(), 1) if ";" in line]
        if semicolons:
            log.write("\n".join(semicolons) + "\na case's name holds ';' (ctest would split it)\n")
            bad += 1
    # One at a time: a case that measures the GPU's free memory must have it to itself (a prime put
    # before this stage is waited for: run it after the cases to overlap it with other work).
    prime_done(v, "the GPU cases have the GPU to themselves")
    env = dict(os.environ, **env_vars, DP_REQUIRE_GPU="1")
    case_out = v.path("case.txt")
    for name in cases:
        with open(log_path, "a") as log:
            if v.clock.left() < 20:
                unrun += 1
                log.write(f"NOT RUN (deadline): {name}\n")
                continue
            if leave_out and fnmatch.fnmatchcase(name, leave_out):
                skipped += 1
                log.write(f"LEFT OUT: {name}\n")
                continue
            s = time.monotonic()
            rc = run([GPU_TESTS, case_filter(name), "--no-intro"], v.clock.limit(case_limit), out=case_out, env=env)
            elapsed = time.monotonic() - s
            took = int(elapsed)
            if elapsed > slowest:
                slowest, slowest_name = elapsed, name
            text = read(case_out)
            if ran_nothing(text):
                rc = 98
            if rc == 0:
                passed += 1
                log.write(f"pass ({took} s): {name}\n")
            else:
                bad += 1
                log.write(f"FAIL (exit {rc}{', timed out' if rc == 124 else ''}, {took} s): {name}\n{tail(text, 40)}")
    if os.path.exists(case_out):
        os.remove(case_out)
    v.result(stage, bad + unrun, f"{passed} of {len(cases)} GPU cases pass, {bad} fail, {unrun} not run"
             f"{f', {skipped} left out' if skipped else ''}, in {seconds_since(t0)} s (slowest {int(max(slowest, 0))} s: "
             f"{slowest_name[:60]})")


# ---- the unit and CLI suites

def stage_unit(v):
    t0 = time.monotonic()
    log_path = v.path("unit.log")
    if os.path.isfile("build-gpu/CTestTestfile.cmake"):
        rc = run(["ctest", "--test-dir", "build-gpu", "-LE", "gpu", f"-j{len(os.sched_getaffinity(0))}",
                  "--output-on-failure"], v.clock.limit(900), out=log_path)
        totals = [line for line in read(log_path).splitlines() if "tests passed" in line]
        v.result("unit", rc, f"ctest -LE gpu in {seconds_since(t0)} s: {totals[-1] if totals else ''}")
        return
    # Prebuilt binaries have no ctest files. What `ctest -LE gpu` runs, run here the same way: each unit
    # case in its own process, every core busy, then the CLI suites beside each other. Not the PyTorch
    # cross-checks (their reference is Debian's CPU PyTorch 1.13, not this image's) nor the MPI suite
    # (the prebuilt dp has no MPI): the CPU machine's CI runs those.
    # DP_UNIT_CASES (a regular expression) and DP_UNIT_SUITES (names) run a part: a rerun of what failed.
    pattern = re.compile(os.environ.get("DP_UNIT_CASES", "") or ".")
    cases = [name for name in doctest_cases(UNIT_TESTS) if pattern.search(name)]
    if "DP_UNIT_SUITES" in os.environ:
        suites = os.environ["DP_UNIT_SUITES"].split()
    else:  # every CLI suite but MPI's and this script's own (it takes the GPU test binary, and fakes a GPU)
        suites = [os.path.basename(f)[:-3] for f in sorted(glob.glob("tests/cli/test_*.py"))]
        suites = [s for s in suites if s not in ("test_mpi", "test_gpu_verify")]
    jobs = [("cli", s) for s in suites] + [("unit", c) for c in cases]  # the suites first: each takes longest
    scratch = tempfile.mkdtemp()

    def one(job):
        (kind, name), k = job
        if v.clock.left() < 15:
            return f"NOT RUN (deadline): {name}\n"
        out = os.path.join(scratch, f"{k}.out")
        if kind == "unit":
            rc = run([UNIT_TESTS, case_filter(name), "--no-intro"], v.clock.limit(300), out=out)
            if ran_nothing(read(out)):
                rc = 98
        else:
            rc = run(["python3", f"tests/cli/{name}.py", DP], v.clock.limit(600), out=out)
        return f"pass: {kind} {name}\n" if rc == 0 else f"FAIL (exit {rc}): {kind} {name}\n{tail(read(out), 30)}"

    with concurrent.futures.ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
        verdicts = list(pool.map(one, zip(jobs, range(len(jobs)))))
    shutil.rmtree(scratch, ignore_errors=True)
    with open(log_path, "w") as log:
        log.write("".join(verdicts))
    passed = sum(x.startswith("pass: ") for x in verdicts)
    bad = sum(x.startswith("FAIL ") for x in verdicts)
    unrun = sum(x.startswith("NOT RUN") for x in verdicts)
    v.result("unit", bad + unrun, f"{passed} of {passed + bad + unrun} pass ({len(cases)} unit cases, each in its own "
             f"process, and {len(suites)} CLI suites), {bad} fail, {unrun} not run, in {seconds_since(t0)} s")


# ---- the same results as host devices

def stage_equal(v):
    """50 steps. Training magnifies last-bit differences step by step, so each comparison is calibrated by
    two host:4 runs that differ only in the order of their float sums (1 and 2 threads per device):
    tolerance 10x their drift, at least 1e-3. The convnet at the default lr 0.05 (its loss jumps to 12
    at step 6 and the GPU's drift grows past what 2 threads' reordering shows) is reported, not judged."""
    log = v.path("equal.log")
    open(log, "w").close()
    bad = 0
    scratch = tempfile.mkdtemp()

    def say(text):
        with open(log, "a") as f:
            f.write(text + "\n")

    for model, lr, judged in (("mlp", "0.05", True), ("convnet", "0.01", True), ("convnet", "0.05", False)):
        files = {}
        for devices in ("cuda:0x4", "host:4", "host:4t2"):
            stem = os.path.join(scratch, f"{model}-{lr}-{devices}")
            files[devices] = [stem + ".jsonl", stem + ".safetensors"]
            extra = ["--threads-per-device", "2"] if devices.endswith("t2") else []
            bad += run([DP, "train", "--model", model, "--devices", devices[:6], *extra, "--steps", "50",
                        "--batch", "128", "--generated-size", "6400", "--lr", lr, "--metrics", files[devices][0],
                        "--save", files[devices][1]], v.clock.limit(300), out=log, append=True) != 0
        say(f"== {model}, lr {lr}: cuda:0x4 against host:4, 50 steps ({'judged' if judged else 'reported'})")
        rc = run(["python3", "tools/gpu/compare_runs.py", *files["cuda:0x4"], *files["host:4"], "--calibrate",
                  *files["host:4t2"], *files["host:4"]], v.clock.limit(300), out=log, append=True)
        bad += rc != 0 and judged
    # One epoch of MNIST on cuda:0x2 and host:2 from the same seed: the same accuracy within 0.5 points.
    if os.path.isfile(".gpu-kit/mnist/train-images-idx3-ubyte.gz"):
        accuracy = []
        for devices in ("cuda:0x2", "host:2"):
            metrics = os.path.join(scratch, f"mnist-{devices}.jsonl")
            bad += run([DP, "train", "--model", "convnet", "--devices", devices, "--data", ".gpu-kit/mnist", "--epochs",
                        "1", "--eval", "--metrics", metrics], v.clock.limit(300), out=log, append=True) != 0
            accuracy.append(best_accuracy(metrics))
        if None in accuracy:
            say(f"== MNIST, one epoch of the convnet: no test accuracy read ({accuracy})")
            bad += 1
        else:
            say(f"== MNIST, one epoch of the convnet: test accuracy cuda:0x2 {accuracy[0]:.4f}, host:2 {accuracy[1]:.4f}")
            bad += not (accuracy[1] > 0.5 and abs(accuracy[0] - accuracy[1]) <= 0.005)
    else:
        say("== MNIST: .gpu-kit/mnist not carried (tools/gpu/kit.sh copies it)")
        bad += 1
    # --device-memory on a GPU: out of memory is exit 3 with its remedies.
    oom = os.path.join(scratch, "oom.txt")
    rc = run([DP, "train", "--model", "convnet", "--devices", "cuda:0", "--batch", "4096", "--steps", "1",
              "--generated-size", "8192", "--device-memory", "16MiB"], v.clock.limit(120), out=oom)
    say(f"== --device-memory 16MiB on cuda:0, batch 4096: exit {rc}\n{tail(read(oom), 5)}".rstrip("\n"))
    bad += rc != 3
    shutil.rmtree(scratch, ignore_errors=True)
    within = sum(line.startswith("within") for line in read(log).splitlines())
    v.result("equal", int(bad), f"50 steps cuda:0x4 against host:4 ({within} of 3 within calibrated tolerance, 2 judged), "
             "MNIST epoch, --device-memory exit 3")


def best_accuracy(metrics):
    """The best test accuracy in a --metrics file (None when it has none or is not there)."""
    values = []
    for line in read(metrics).splitlines():
        try:
            values.append(json.loads(line).get("test_accuracy") or 0)
        except ValueError:
            return None
    return max(values) if values else None


# ---- the other scripts' stages

def stage_capabilities(v):
    t0 = time.monotonic()
    log = v.path("capabilities.md")
    # Each memprof report from the GPU goes to $OUT/fixtures (record_run.py makes them tests/fixtures/gpu-memprof).
    rc = run(["python3", "tools/gpu/capabilities.py", "--dp", DP, "--only",
              os.environ.get("DP_CAPABILITIES", "") or "plan,zero,file,memory", "--fixtures", v.path("fixtures")],
             v.clock.limit(900), out=log, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    verdicts = [line[:120] for line in read(log).splitlines() if re.match(r"(PASS|FAIL) ", line)]
    v.result("capabilities", rc, f"tools/gpu/capabilities.py in {seconds_since(t0)} s: {' '.join(verdicts)}")


def stage_profile(v):
    """DP_PROFILE_SPECS: profile.sh's specs instead of these (e.g. "replicas:mlp:1024")."""
    t0 = time.monotonic()
    specs = (os.environ.get("DP_PROFILE_SPECS", "") or "convnet:1024 resnet18:256 mlp:1024 phases:mlp:1024 "
             "phases:convnet:1024 replicas:convnet:1024 loader:mlp:1024").split()
    rc = run(["tools/gpu/profile.sh", *specs], v.clock.limit(900), env=dict(os.environ, OUT=v.out))
    v.result("profile", rc, f"tools/gpu/profile.sh {' '.join(specs)} in {seconds_since(t0)} s (profile.txt)")


def stage_export(v):
    """The exporter's checks with this machine's PyTorch; exit 77 (no torchvision) is a SKIP line."""
    t0 = time.monotonic()
    log = v.path("export.log")
    if run(["python3", "-c", 'import torch; print("torch", torch.__version__)'], v.clock.limit(120), out=log) != 0:
        v.note(f"SKIP export: no PyTorch for python3 ({tail(read(log), 1).strip()})")
        return
    ran, worst = 0, 0
    for check in ("nanogpt_export_check", "zoo_export_check"):
        with open(log, "a") as f:
            f.write(f"== {check}\n")
        rc = run(["python3", f"tests/torch/{check}.py", DP], v.clock.limit(600), out=log, append=True,
                 env=dict(os.environ, PYTHONUNBUFFERED="1"))
        if rc == 77:
            v.note(f"SKIP export: {check} ({tail(read(log), 1).strip()})")
            continue
        ran += 1
        worst = rc or worst
    if ran:
        text = read(log).splitlines()
        said = [line[:100] for line in text if re.search("passed|FAILED", line)]
        v.result("export", worst, f"the exporter under {text[0]} in {seconds_since(t0)} s: {' '.join(said)}")


def stage_mpi(v):
    """tests/cli/test_mpi.py: training across processes, its GPU case one rank through NCCL; the suite
    skips itself (exit 77) where dp was built without MPI."""
    t0 = time.monotonic()
    log = v.path("mpi.log")
    if not shutil.which("mpirun"):
        v.note("SKIP mpi: no mpirun on this machine (the NCCL-over-ranks case needs it)")
        return
    rc = run(["python3", "tests/cli/test_mpi.py", DP], v.clock.limit(600), out=log)
    if rc == 77:
        v.note(f"SKIP mpi: {tail(read(log), 1).strip()}")
        return
    totals = [line for line in read(log).splitlines() if re.match(r"[0-9]+ passed, [0-9]+ failed", line)]
    v.result("mpi", rc, f"tests/cli/test_mpi.py in {seconds_since(t0)} s: {totals[-1] if totals else tail(read(log), 1).strip()}")


def stage_prime(v):
    """torch.compile's cache filled for the bench's table 9, in the background while the stages after it
    run (they time nothing; the bench waits for it before it times anything)."""
    args = os.environ.get("DP_BENCH_ARGS", "").split()
    log = open(v.path("prime.log"), "w")
    p = subprocess.Popen(["python3", "tools/bench/bench_gpu.py", "--dp", DP, "--prime", *args], stdout=log,
                         stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
    log.close()
    limit = threading.Timer(v.clock.limit(400), lambda: p.poll() is None and stop_group(p, grace=5))
    limit.daemon = True
    limit.start()
    v.prime = (p, limit)
    v.note("PASS prime: started torch.compile's cache for the bench in the background (prime.log)")


def prime_done(v, why="the bench times alone"):
    """Waits for the prime, at most DP_PRIME_WAIT seconds (90), then stops it: the bench must time alone,
    and a GPU case must have the GPU to itself (the reason given, for prime.log)."""
    if v.prime is None:
        return
    p, limit = v.prime
    most = int(os.environ.get("DP_PRIME_WAIT", "") or 90)
    waited = 0
    while p.poll() is None and waited < most and v.clock.left() > 60:
        time.sleep(1)
        waited += 1
    if p.poll() is None:
        stop_group(p, grace=5)
        with open(v.path("prime.log"), "a") as f:
            f.write(f"stopped after waiting {waited} s: {why}\n")
    limit.cancel()
    p.wait()
    v.prime = None


def stage_bench(v):
    t0 = time.monotonic()
    prime_done(v)
    args = os.environ.get("DP_BENCH_ARGS", "")
    rc = run(["python3", "tools/bench/bench_gpu.py", "--dp", DP, *args.split()],
             v.clock.limit(int(os.environ.get("DP_BENCH_SECONDS", "") or 900)), out=v.path("bench.md"),
             env=dict(os.environ, PYTHONUNBUFFERED="1"))
    v.result("bench", rc, f"tools/bench/bench_gpu.py {args} in {seconds_since(t0)} s (bench.md)")


STAGES = {"probe": stage_probe, "build": stage_build, "tests": stage_tests, "poisoned": stage_poisoned,
          "unit": stage_unit, "sanitize": stage_sanitize, "equal": stage_equal, "capabilities": stage_capabilities,
          "mpi": stage_mpi, "profile": stage_profile, "prime": stage_prime, "bench": stage_bench, "export": stage_export}


# ---- the call

def pack(v):
    """At most 8 files come back from a GPU machine: with more, or a folder (the fixtures), everything but
    the summary goes into logs.tar.gz (DP_PACK_LOGS=0 leaves them as they are)."""
    made = sorted(name for name in os.listdir(v.out) if name != "summary.txt"
                  and (os.path.isfile(v.path(name)) or os.path.isdir(v.path(name))))
    folders = any(os.path.isdir(v.path(name)) for name in made)
    if os.environ.get("DP_PACK_LOGS", "1") == "0" or not (len(made) > 7 or folders):
        return
    part = v.path("logs.tar.gz.part")
    with tarfile.open(part, "w:gz") as tar:
        for name in made:
            tar.add(v.path(name), arcname=name)
    os.replace(part, v.path("logs.tar.gz"))
    for name in made:
        if name == "logs.tar.gz":
            continue
        if os.path.isdir(v.path(name)):
            shutil.rmtree(v.path(name))
        else:
            os.remove(v.path(name))
    print(f"({len(made)} logs packed into {v.path('logs.tar.gz')})")


def main(argv):
    within = None
    if argv[:1] == ["--within"]:
        if len(argv) < 2 or not re.fullmatch(r"[0-9]+", argv[1]):
            print("verify.py: --within takes seconds, e.g. --within 520", file=sys.stderr)
            return 2
        within, argv = int(argv[1]), argv[2:]
    stages = argv or ["probe", "build", "tests", "equal", "bench"]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        print(f"verify.py: unknown stage '{unknown[0]}' ({', '.join(STAGES)})", file=sys.stderr)
        return 2
    os.chdir(ROOT)
    v = Verify(os.environ.get("OUT", "") or "verify-out", Clock(within))
    # Debian's OpenBLAS in the kit misreads these CPUs and falls back to generic kernels (as ctest's
    # DP_TEST_ENV does on the CPU machine): every stage's CPU references and host devices get the core.
    if not os.environ.get("OPENBLAS_CORETYPE"):
        flags = read("/proc/cpuinfo").split()
        if "avx512f" in flags:
            os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
        elif "avx2" in flags:
            os.environ["OPENBLAS_CORETYPE"] = "Haswell"
    try:
        for stage in stages:
            if stage in ("probe", "build"):
                STAGES[stage](v)
            elif not v.env_ready():
                v.note(f"FAIL {stage}: no build-gpu/env.sh (run the build stage first)")
                v.failed += 1
            elif v.fits(stage, NEEDS[stage]):
                STAGES[stage](v)
    finally:
        prime_done(v)
    print("---- summary")
    print(read(v.summary), end="", flush=True)
    pack(v)
    return v.failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
