"""tools/gpu/verify.py's sanitize stage: compute-sanitizer's four tools on every GPU test case and on
dp train runs, several processes at once on the one GPU, each verdict kept for a later call on the same
binaries and, clean, recorded by the sources it checked (tools/gpu/sanitized.txt). Standard library only."""
import concurrent.futures
import glob
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

from verify_call import DP, GPU_TESTS, capture, case_filter, doctest_cases, ran_nothing, read, run, seconds_since, sha1, tail

# The kernels of cuBLAS, cuDNN and NCCL, by what their names hold (as the profiles print them): racecheck
# on the step cases leaves them out. It checks shared memory within a kernel, and the step cases run the
# kernels the kernel cases and the dp train runs have checked whole, libraries included; what the step
# cases add is dp's kernels at the step's shapes. Instrumenting every library GEMM and convolution of
# several trainings kept all 12 unfinished in every GPU run to 2026-11-26. No kernel of dp's matches
# (tests/cli/test_gpu_verify.py checks its sources).
LIBRARY_KERNELS = "xmma|cutlass|cudnn|cublas|nccl|fft2d|convolve|wgrad_alg|wgrad2d|dgrad|flip_filter|winograd|op_generic|gemv|gemmSN|splitKreduce"
# dp's own kernels, all in namespace dp::cuda: the name demangled or mangled (_ZN2dp4cuda...)
DP_KERNELS = "dp::cuda|2dp4cuda"
# a filter no kernel's name matches, mangled or not (a C++ name holds no '-')
NO_KERNELS = "^instrument-no-kernel$"
# Cases whose CUDA calls fail by design: the check that a failed call is reported once makes one fail;
# NCCL's set-up asks for kernels built for other GPUs and gets error 209 inside libnccl; the
# out-of-memory cases fill the GPU until cudaMalloc fails. Their API errors are expected (dp checks every
# return code and throws or, out of memory, empties caches and says so); their memory accesses are
# still checked.
API_ERRORS_BY_DESIGN = ("a failed CUDA call is reported once", "NCCL on one GPU", "memory comes back", "sibling's cache")
# The named runs (mlp and convnet; in-replica, eval, tf32, split auto, balance-memory), then what came
# after: captured steps, --sync allreduce (the ring on the comm streams; bf16; with --accumulate:
# no_sync, the sum added into its buckets), the GPT with dropout, resnet8 recomputing, the convnet with
# cuDNN timing its algorithms (on the allocator's memory since 2026-11-27).
TRAINS = (
    "--model mlp",
    "--model convnet",
    "--model mlp --loss in-replica --eval",
    "--model convnet --tf32 --split auto",
    "--model convnet --split balance-memory",
    "--model mlp --cuda-graphs on",
    "--model convnet --cuda-graphs on --loss in-replica",
    "--model mlp --sync allreduce --loss in-replica --bucket-mb 0.5",
    "--model convnet --sync allreduce --loss in-replica --precision bf16",
    "--model convnet --sync allreduce --loss in-replica --accumulate 2 --batch 32",
    "--model gpt --gpt-layers 2 --gpt-dim 64 --context 32 --batch 8 --generated-size 20000 --dropout 0.2",
    "--model resnet8 --batch 16 --recompute blocks --generated-size 256",
    "--model convnet --cudnn benchmark",
)
# The sources one run checks, for its recorded verdict: a test case's, and a dp train run's.
SOURCES_CASES = ("CMakeLists.txt", "core", "kernels", "runtime", "models", "data", "io", "engine", "tools/dp/flags",
                 "tests/gpu", "tests/helpers.hpp", "tests/step_batches.hpp", "tests/conv_wgrad_cases.hpp",
                 "tests/doctest_main.hpp")
SOURCES_TRAIN = ("CMakeLists.txt", "core", "kernels", "runtime", "models", "data", "io", "engine", "plan", "tools/dp")
FINDING_LINE = re.compile(r"ERROR SUMMARY|========= (Invalid|Race|Uninitialized|Barrier|Program hit|Host API|Internal "
                          r"Sanitizer)|^=========     (at|by|Uninitialized)")
FINDING = re.compile(r"^========= (Invalid|Race|Uninitialized|Barrier|Program hit|Host API)")
# compute-sanitizer refusing the GPU (gVisor), matched in its own words (its lines start =========)
SANITIZER_CANNOT = re.compile(r"device not supported|^=+ .*(unable to|failed to initialize|not supported)", re.I)


def tally(text):
    """Every finding in a compute-sanitizer log, counted by what it is and where it was: the kernel it ran
    in (device side), or the CUDA call and the first dp frame that made it (host side); the log prints
    each finding's first lines only up to a limit, this sees all of them. Lines "count  kind  |  where",
    the most frequent first."""
    counts = {}
    kind = at = api = dpf = ""

    def flush():
        if kind:
            where = at or ((api or "?") + (f" from {dpf}" if dpf else ""))
            counts[f"{kind}  |  {where}"] = counts.get(f"{kind}  |  {where}", 0) + 1

    for line in text.splitlines():
        if re.match(r"^========= [A-Z]", line) and not re.search("ERROR SUMMARY|COMPUTE-SANITIZER|Saved host backtrace", line):
            flush()
            kind, at, api, dpf = re.sub(r"0x[0-9a-f]+", "X", line[10:]), "", "", ""
        elif line.startswith("=========     at "):
            at = at or re.sub(r"\+0x[0-9a-f]+.*$", "", line[len("=========     at "):])[:120]
        elif re.search(r"Host Frame: cu[A-Za-z_0-9]+ ", line):
            api = api or re.sub(r" .*", "", re.sub(r".*Host Frame: ", "", line, count=1))
        elif "Host Frame: dp::" in line:
            dpf = dpf or re.sub(r"\(.*$", "", re.sub(r".*Host Frame: ", "", line, count=1))
    flush()
    lines = [f"{n:7d}  {k}" for k, n in counts.items()]
    return sorted(lines, key=lambda line: (int(line.split()[0]), line.encode()), reverse=True)


class Sanitizer:
    """The sanitize stage's runs: where each verdict goes, what is taken from earlier runs."""

    def __init__(self, v, log, scratch):
        self.v = v
        self.log = log
        self.scratch = scratch
        self.lock = threading.Lock()
        self.timeout = int(os.environ.get("DP_SANITIZE_TIMEOUT", "") or 540)
        # Finished runs, kept for a later call on this machine, by the binaries they ran.
        binaries = hashlib.md5()
        for path in (DP, GPU_TESTS):
            with open(path, "rb") as f:
                binaries.update(f.read())
        self.done = os.path.join(os.environ.get("DP_SANITIZE_DONE_ROOT", "") or "/tmp/dp-sanitized",
                                 binaries.hexdigest())
        os.makedirs(self.done, exist_ok=True)
        # Clean verdicts of earlier GPU runs, by run and sources (DP_SANITIZE_RECORDED=/dev/null: none),
        # and this run's, written to $OUT/sanitized.txt for appending to it.
        recorded = os.environ.get("DP_SANITIZE_RECORDED", "") or "tools/gpu/sanitized.txt"
        self.recorded = {line.split(" ", 1)[0] for line in read(recorded).splitlines() if " " in line}
        self.clean = v.path("sanitized.txt")
        open(self.clean, "w").close()
        self.sources_cases = source_hash(SOURCES_CASES)
        self.sources_train = source_hash(SOURCES_TRAIN)
        self.initcheck_extra = []

    def append(self, path, text):
        """Appends to a file the parallel runs share, one writer at a time."""
        with self.lock, open(path, "a") as f:
            f.write(text)

    def one(self, tool, log, cmd):
        """One compute-sanitizer run of cmd, its short log in the file log, whose last line is the verdict:
        "clean", "dirty", "unfinished" or (racecheck failing itself with no kernel instrumented)
        "tool-failed". Its time limit is DP_SANITIZE_TIMEOUT or what is left, if less. A run that
        finished in an earlier call on this machine with the same binaries is not run again (its verdict
        is copied: a second call goes on where the first was cut off), nor one recorded clean at these
        sources in tools/gpu/sanitized.txt."""
        options = []
        if tool == "racecheck-ours":  # racecheck on dp's kernels only (LIBRARY_KERNELS left out)
            tool, options = "racecheck", ["--kernel-name-exclude", f"regex={LIBRARY_KERNELS}"]
        command = " ".join(cmd)
        if any(name in command for name in API_ERRORS_BY_DESIGN):
            options += ["--report-api-errors", "no"]
        if tool == "initcheck":  # with what stage_sanitize found this compute-sanitizer takes
            options += self.initcheck_extra
        header = f"== compute-sanitizer --tool {tool} {command}"
        shown = header + (f" ({' '.join(options)})" if options else "")
        done_file = os.path.join(self.done, sha1(header + " ".join(options) + "\n") + ".log")
        # the run and the sources it checks (a dp train run: the library and dp's; a test case: the
        # library and the tests)
        sources = self.sources_train if " train " in command else self.sources_cases
        key = sha1(f"{header}{' '.join(options)} {sources}\n")
        cap = self.v.clock.limit(self.timeout)
        if key in self.recorded:
            verdict = f"{shown}\n-- (clean at these sources in an earlier GPU run: tools/gpu/sanitized.txt)\nclean\n"
        elif os.path.exists(done_file):
            lines = read(done_file).splitlines()
            verdict = "".join(line + "\n" for line in lines[:-1] + ["-- (finished in an earlier call with these binaries)",
                                                                     lines[-1]])
        elif cap < 15:
            verdict = f"{shown}\n-- not started: the deadline\nunfinished\n"
        else:
            verdict = self.checked(tool, options, cmd, shown, log, cap)
            if not verdict.endswith("unfinished\n"):
                with open(done_file, "w") as f:
                    f.write(verdict)
        with open(log, "w") as f:
            f.write(verdict)
        if verdict.endswith("\nclean\n"):  # its key for tools/gpu/sanitized.txt
            self.append(self.clean, f"{key} {tool} {' '.join(map(in_build_dir, cmd))}\n")
        # into the stage's log as each run ends: a stage cut short by a time limit still reports
        self.append(self.log, verdict)

    def checked(self, tool, options, cmd, shown, log, cap):
        """Runs the check; its short log, verdict last, reruns of a dirty run included."""
        full = log + ".full"
        # --print-limit: the tally sees (nearly) every finding, not the default 100
        rc = run(["compute-sanitizer", "--tool", tool, *options, "--print-limit", "20000", "--error-exitcode", "99", *cmd],
                 cap, out=full)
        text = read(full)
        os.remove(full)
        if ran_nothing(text):  # a doctest filter that matched nothing ran nothing: not clean
            rc = 98
        lines = [shown]
        # each finding's first line and where it was (the kernel, its thread and block)
        lines += [line for line in text.splitlines() if FINDING_LINE.search(line)][:30]
        if any(FINDING.match(line) for line in text.splitlines()):
            lines += ["-- every finding, counted by kind and where:"] + tally(text)[:40]
        if rc == 124:
            lines.append(f"-- TIMED OUT after {cap} s (not clean: unfinished)")
        if rc != 0:
            lines += [f"-- exit {rc}; the end of its output:"] + text.splitlines()[-40:]
        lines.append("clean" if rc == 0 else "unfinished" if rc == 124 else "dirty")
        # A dirty run's first findings whole (each with its address and the host frames that launched the
        # kernel: which op read what), for the account afterwards; one file for every run (few files are
        # kept from the GPU machine).
        if rc not in (0, 124):
            with gzip.open(log + ".full.gz", "wt") as f:
                f.write(shown + "\n" + "".join(line + "\n" for line in text.splitlines()[:3000]))
        dirty = rc not in (0, 124, 98)  # findings or a failed case: not cut short, not a filter matching nothing
        # A dirty initcheck run, once more with every allocation dp makes written first (NaN,
        # DP_POISON_ALLOCATIONS=1). Clean then: every read it flagged is of dp's own blocks, and the case
        # still passes with them NaN first, so what those reads found had been written (by writes the
        # tool does not follow) wherever a NaN would reach the case's checks. Dirty still: memory outside
        # dp's allocator (a library's own), or a case that fails on NaN. The verdict stays dirty.
        if dirty and tool == "initcheck" and not os.environ.get("DP_POISON_ALLOCATIONS"):
            self.again(lines, "with DP_POISON_ALLOCATIONS=1 (every allocation written first)",
                       ["compute-sanitizer", "--tool", tool, *options, "--print-limit", "20000", "--error-exitcode", "99",
                        *cmd], log, env=dict(os.environ, DP_POISON_ALLOCATIONS="1"))
        # racecheck that failed itself (an "Internal Sanitizer Error", as on cuDNN's bf16 convolutions on
        # an H100), once more with a filter that names dp's kernels instead of the libraries', so no
        # library kernel is instrumented whatever its name: clean then, the exclude list let through a
        # library kernel racecheck cannot instrument. The same error (H100, 2026-11-27): once more with a
        # filter no kernel's name can match, so racecheck instruments nothing. The same error again:
        # racecheck's presence alone breaks a kernel, and no kernel of dp's is involved (neither clean
        # nor dirty: its own verdict, which still fails the stage); clean: one of dp's kernels,
        # instrumented, is where it fails.
        if dirty and tool == "racecheck" and "Internal Sanitizer Error" in text:
            ours = [o for o in options if o != "--kernel-name-exclude" and not o.startswith("regex=")]

            def racecheck(kernels):
                return ["compute-sanitizer", "--tool", "racecheck", *ours, "--kernel-name", f"regex={kernels}",
                        "--print-limit", "20000", "--error-exitcode", "99", *cmd]
            if self.again(lines, f"checking dp's kernels only (--kernel-name regex={DP_KERNELS})", racecheck(DP_KERNELS),
                          log) and \
                    self.again(lines, f"instrumenting no kernel (--kernel-name regex={NO_KERNELS})",
                               racecheck(NO_KERNELS), log):
                lines[-1:] = ["-- racecheck fails itself instrumenting no kernel: the tool's failure, not dp's",
                              "tool-failed"]
        return "".join(line + "\n" for line in lines)

    def again(self, lines, label, command, log, env=None):
        """A dirty run's check once more, changed as label says: its verdict goes into lines above the
        first run's, which stays the run's (the last line). True when the tool failed itself again (an
        "Internal Sanitizer Error"); a rerun the deadline leaves no time for is not one."""
        cap = self.v.clock.limit(self.timeout)
        if cap < 15:
            return False
        rc = run(command, cap, out=log + ".again", env=env)
        text = read(log + ".again")
        os.remove(log + ".again")
        if rc == 0:
            said = [f"-- again {label}: clean"]
        elif rc == 124:
            said = [f"-- again {label}: unfinished (time limit)"]
        else:
            said = [f"-- again {label}: dirty (exit {rc}), every finding:"] + tally(text)[:20]
            said += [line for line in text.splitlines() if "Internal Sanitizer Error" in line][:3]
        lines[-1:-1] = said
        return "Internal Sanitizer Error" in text


def in_build_dir(path):
    """A path as the recorded verdicts write it: relative to build-gpu."""
    return path[len("build-gpu/"):] if path.startswith("build-gpu/") else path


def source_hash(paths):
    return subprocess.run(["tools/gpu/source_hash.sh", *paths], capture_output=True, text=True, check=True).stdout.strip()


def stage_sanitize(v):
    """compute-sanitizer on every GPU case and on dp train runs, several processes at once on the one GPU
    (DP_SANITIZE_JOBS, 14), the most telling first: memcheck on everything, then the other three on the
    kernel cases and the train runs, then on the step cases, initcheck first (slow: every kernel of
    several trainings instrumented). A dirty initcheck run is run once more poisoned, a racecheck run
    the tool failed itself once more on dp's kernels only, and if it fails itself there too, a third
    time instrumenting no kernel ("tool-failed", neither clean nor dirty)."""
    t0 = time.monotonic()
    log = v.path("sanitize.log")
    scratch = tempfile.mkdtemp()
    s = Sanitizer(v, log, scratch)
    open(log, "w").close()
    cases = doctest_cases(GPU_TESTS)
    # First, whether compute-sanitizer can instrument this GPU at all (on gVisor it says "Device not
    # supported" and every run would read as dirty): one kernel case, seconds.
    first = cases[0] if cases else ""
    tried_log = os.path.join(scratch, "tried.txt")
    run(["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "99", GPU_TESTS, case_filter(first)],
        v.clock.limit(90), out=tried_log)
    tried = read(tried_log)
    refusal = next((re.sub(r"^=* *", "", line) for line in tried.splitlines() if SANITIZER_CANNOT.search(line)), "")
    if refusal:
        kernel = os.uname().release
        with open(log, "w") as f:
            f.write(f"== compute-sanitizer cannot instrument this GPU here (kernel {kernel}):\n{tail(tried, 20)}")
        shutil.rmtree(scratch, ignore_errors=True)
        v.result("sanitize", 1, f"not run: compute-sanitizer cannot instrument this GPU here ({refusal}; kernel {kernel})")
        return
    # What initcheck sees: Hopper kernels (cuBLAS's and cuDNN's among them) store through bulk copies
    # (TMA) and warpgroup MMA, which compute-sanitizer instruments only when asked (where it has the
    # options); a store it does not see makes every later read of those bytes read as uninitialised.
    # Asked for when this compute-sanitizer lists the options and a kernel case runs clean with them.
    version = next((line for line in capture(["compute-sanitizer", "--version"]).splitlines()
                    if "version" in line.lower()), "")
    said = [f"== this compute-sanitizer: {version}"]
    helptext = capture(["compute-sanitizer", "--help"])
    wanted = [w for opt in ("--check-bulk-copy", "--check-warpgroup-mma") if opt in helptext for w in (opt, "yes")]
    if wanted:
        probe = os.path.join(scratch, "initcheck-options.txt")
        if run(["compute-sanitizer", "--tool", "initcheck", *wanted, "--error-exitcode", "99", GPU_TESTS,
                case_filter(first)], v.clock.limit(90), out=probe) == 0:
            s.initcheck_extra = wanted
            said.append(f"== initcheck runs with {' '.join(wanted)}")
        else:
            said.append(f"== initcheck without {' '.join(wanted)} (a kernel case with them did not run clean):")
            said += read(probe).splitlines()[-5:]
    else:
        said.append("== initcheck as it comes (this compute-sanitizer lists neither --check-bulk-copy nor "
                    "--check-warpgroup-mma)")
    s.append(log, "".join(line + "\n" for line in said))
    # DP_SANITIZE_QUICK=1: racecheck, synccheck and initcheck only on the kernel cases and the first two
    # trains (memcheck on everything). DP_SANITIZE_PART=slow|rest: only the step cases under racecheck,
    # synccheck and initcheck (slow), or everything else (rest). DP_SANITIZE_MATCH: only the runs whose
    # tool and command match this regular expression (e.g. '^racecheck-ours .*bf16' for the racecheck of
    # the step cases with bf16 in their names).
    quick = os.environ.get("DP_SANITIZE_QUICK", "") == "1"
    part = os.environ.get("DP_SANITIZE_PART", "") or "all"
    match = os.environ.get("DP_SANITIZE_MATCH", "")
    runs = []  # (tool, command), started in this order, DP_SANITIZE_JOBS at a time on the one GPU

    def job(tool, *cmd):
        if not match or re.search(match, " ".join((tool, *cmd))):
            runs.append((tool, list(cmd)))

    def train(tool, flags):
        job(tool, DP, "train", "--devices", "cuda:0x4", "--steps", "3", "--generated-size", "384", *flags.split())

    step_cases, kernel_cases, alone, timed = [], [], [], []
    for name in cases:
        if "memory comes back" in name or "sibling's cache" in name:
            alone.append(name)  # they measure or fill the GPU's memory: they would see the others' processes
        elif "replica times on a GPU" in name:
            # it compares the GPU's times (a replica with 255 times the work takes longer): the other tools'
            # instrumentation costs per kernel and per barrier, not per unit of work, so only memcheck
            # keeps the proportion it asserts
            timed.append(name)
        elif "cuda:0x" in name:
            step_cases.append(name)
        else:
            kernel_cases.append(name)
    if part != "slow":
        for name in kernel_cases + step_cases + timed:
            job("memcheck", GPU_TESTS, case_filter(name))
        for flags in TRAINS:
            train("memcheck", flags)
        for tool in ("racecheck", "synccheck", "initcheck"):
            for name in kernel_cases:
                job(tool, GPU_TESTS, case_filter(name))
            for flags in TRAINS[:2] if quick else TRAINS:
                train(tool, flags)
    if not quick and part != "rest":
        # initcheck first: what a step adds to its kernels is ordering between streams, which decides
        # whether a read finds memory written; racecheck and synccheck look inside each kernel (shared
        # memory, barriers), which the kernel cases have covered already; racecheck on dp's kernels only
        for tool in ("initcheck", "synccheck", "racecheck-ours"):
            for name in step_cases:
                job(tool, GPU_TESTS, case_filter(name))
    numbered = iter(range(1001, 1000000))

    def alone_under(tool):
        """The cases that fill the GPU's memory, alone: memcheck first (it belongs with memcheck on every
        case, and coming last it was never reached in two H100 runs of 2026-11-26), initcheck last."""
        if part == "slow":
            return
        for name in alone:
            if not match or re.search(match, f"{tool} {GPU_TESTS} {case_filter(name)}"):
                s.one(tool, os.path.join(scratch, f"{next(numbered)}.log"), [GPU_TESTS, case_filter(name)])

    alone_under("memcheck")
    jobs = int(os.environ.get("DP_SANITIZE_JOBS", "") or 14)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for done in [pool.submit(s.one, tool, os.path.join(scratch, f"{next(numbered)}.log"), cmd) for tool, cmd in runs]:
            done.result()
    alone_under("initcheck")
    findings = sorted(glob.glob(os.path.join(scratch, "*.log.full.gz")))
    if findings:  # one gzip stream per dirty run, concatenated: zcat reads them as one text
        with open(v.path("sanitize-findings.txt.gz"), "wb") as f:
            for path in findings:
                with open(path, "rb") as part_file:
                    f.write(part_file.read())
    shutil.rmtree(scratch, ignore_errors=True)
    lines = read(log).splitlines()
    total = sum(line.startswith("== compute-sanitizer") for line in lines)
    bad, unfinished, tool_failed = (lines.count(w) for w in ("dirty", "unfinished", "tool-failed"))
    earlier = sum(line.startswith("-- (finished in an earlier call") for line in lines)
    recorded = sum(line.startswith("-- (clean at these sources") for line in lines)
    clean_keys = len(read(s.clean).splitlines())
    tool_text = f", {tool_failed} failed by racecheck itself (instrumenting no kernel)" if tool_failed else ""
    v.result("sanitize", bad + unfinished + tool_failed,
             f"{total - bad - unfinished - tool_failed} of {total} compute-sanitizer runs clean, {bad} dirty, {unfinished} "
             f"unfinished (time limit){tool_text}; {earlier} verdicts from an earlier call, {recorded} recorded at these "
             f"sources (sanitized.txt: {clean_keys} clean); in {seconds_since(t0)} s")
