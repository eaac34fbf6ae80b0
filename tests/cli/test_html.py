"""dp's run page (--html on demo, memprof and plan) rendered in a real headless Chromium: the page
loads with no script error and nothing logged to the console; a lane per device; at #view=peak each
device's bars sum to its peak_bytes (and equal what was in use at its peak, category by category,
as the run's --json says); at #t=<ms> the bars are that phase's memory; #strategy= switches a plan
--compare page between strategies; the transfers (DataParallel's reduce, ZeRO's reduce-scatter)
are drawn; eight devices fit a 1280x800 screen; the file is self-contained (no network address)
and small. Screenshots go to the artefact folder.

usage: test_html.py DP_BINARY [ARTEFACT_DIR]   (exit 77 when no Chromium is installed)
"""
import html.parser
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
if not CHROMIUM:
    print("skipped: no chromium on PATH (tools/test.sh installs Debian's)")
    sys.exit(77)

CLI = Cli()
check, run = CLI.check, CLI.run
ARTEFACTS = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--virtual-time-budget=3000", "--enable-logging=stderr", "--v=0", "--no-first-run",
                "--disable-extensions", "--disable-background-networking"]
SIZE = "--window-size=1280,800"


class Dom(html.parser.HTMLParser):
    """The rendered page's elements, as (tag, attributes), and its markup."""

    def __init__(self, text):
        super().__init__()
        self.elements = []
        self.text = text
        self.feed(text)

    def inner(self, element_id):
        """The text inside the element of that id (tags stripped)."""
        m = re.search(r'<(\w+)[^>]*\bid="' + element_id + r'"[^>]*>(.*?)</\1>', self.text, re.S)
        return re.sub(r"<[^>]+>", " ", m.group(2)) if m else ""

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def with_attr(self, name):
        return [a for _, a in self.elements if name in a]

    def body(self):
        return next(a for t, a in self.elements if t == "body")


def render(page, fragment, profile, size=SIZE):
    """The DOM after the page's script ran at file://page#fragment, and the console lines."""
    p = subprocess.run([CHROMIUM] + CHROME_FLAGS + [size, f"--user-data-dir={profile}", "--dump-dom",
                                                    f"file://{page}#{fragment}"],
                       capture_output=True, text=True, errors="replace", timeout=120)
    console = [line for line in p.stderr.splitlines() if "CONSOLE" in line]
    return Dom(p.stdout), console, p.returncode


def screenshot(page, fragment, name, profile):
    if not ARTEFACTS:
        return
    os.makedirs(ARTEFACTS, exist_ok=True)
    out = os.path.join(ARTEFACTS, name)
    subprocess.run([CHROMIUM] + CHROME_FLAGS + [SIZE, f"--user-data-dir={profile}", f"--screenshot={out}",
                                                f"file://{page}#{fragment}"],
                   capture_output=True, timeout=120)
    check(f"{name}: screenshot written", os.path.getsize(out) > 10000 if os.path.exists(out) else False)


def unpack(x, categories):
    """The page's data with its category arrays made objects again, as the page's script does."""
    if isinstance(x, list):
        return [unpack(v, categories) for v in x]
    if not isinstance(x, dict):
        return x
    return {k: dict(zip(categories, v)) if k in ("at_peak", "peak_by_category") and isinstance(v, list)
            else unpack(v, categories) for k, v in x.items()}


def embedded(page):
    """The page's data (window.dpPage), read from the file."""
    text = open(page).read()
    m = re.search(r'<script type="application/json" id="dp-data">(.*?)</script>', text, re.S)
    data = json.loads(m.group(1))
    data = unpack(data, data["categories"])
    for r in data["runs"]:  # as the page's script: columns and rows made objects, the windows' memory
        for key in ("bands", "transfers"):
            r[key] = [dict(zip(r[key]["fields"], row)) for row in r[key]["rows"]]
        for w in r["windows"]:
            w["memory"] = None if w["timeline"] is None else r["report"]["timeline"][w["timeline"]]["devices"]
    return data


def bars(dom):
    """{device: {category: bytes}} of the memory bars drawn."""
    out = {}
    for a in dom.with_attr("data-bar"):
        out.setdefault(int(a["data-device"]), {})[a["data-category"]] = int(float(a["data-bytes"]))
    return out


def nonzero(categories):
    return {k: v for k, v in categories.items() if v}


def loads_cleanly(label, page, fragment, devices, profile, size=SIZE):
    """The page renders with its script done, no error, nothing on the console, a lane per device,
    no label crossing another (the page measures its labels' boxes: data-label-overlaps)."""
    dom, console, rc = render(page, fragment, profile, size)
    body = dom.body()
    check(f"{label} #{fragment}: chromium exits 0", rc == 0, f"exit {rc}")
    check(f"{label} #{fragment}: the script ran to the end", body.get("data-ready") == "1", str(body))
    check(f"{label} #{fragment}: no script error", "data-script-errors" not in body, body.get("data-script-errors", ""))
    check(f"{label} #{fragment}: nothing on the console", not console, "\n".join(console))
    lanes = dom.with_attr("data-lane")
    check(f"{label} #{fragment}: a lane per device", sorted(int(a["data-device"]) for a in lanes) == list(range(devices)),
          str([a.get("data-device") for a in lanes]))
    check(f"{label} #{fragment}: fits {size.split('=')[1]} without scrolling sideways", body.get("data-fits-width") == "1",
          str(body.get("data-fits-width")))
    check(f"{label} #{fragment} at {size.split('=')[1]}: no label crosses another", body.get("data-label-overlaps") == "0",
          str(body.get("data-label-overlaps")))
    return dom


def nice(step, unit_base):
    """Whether an axis step is 1, 2 or 5 times a power of ten (bytes: of a power of 1024, or that power)."""
    unit = 1
    while unit_base == 1024 and unit * 1024 <= step:
        unit *= 1024
    mantissa = step / unit / 10 ** math.floor(math.log10(step / unit) + 1e-9)
    return any(abs(mantissa - m) < 1e-6 for m in (1, 2, 5, 10))


def ticks_are_nice(label, dom):
    """The axes' ticks: 1-2-5 steps, never 83.13 KiB or 102.08 ms."""
    body = dom.body()
    for key, base in (("data-time-step", 10), ("data-byte-step", 1024)):
        if key in body:
            check(f"{label}: the axis steps by {body[key]} ({'ms' if base == 10 else 'bytes'}): 1, 2 or 5 times a power",
                  nice(float(body[key]), base), body[key])


def at_widths(label, page, fragment, devices, profile):
    """The page at 800 and 1400 px wide: loads cleanly, labels apart (loads_cleanly checks both)."""
    return {width: loads_cleanly(f"{label} ({width} px)", page, fragment, devices, profile, f"--window-size={width},900")
            for width in (800, 1400)}


def self_contained(label, page):
    text = open(page).read()
    size = os.path.getsize(page)
    check(f"{label}: under 500 KB", size < 500_000, f"{size} bytes")
    refs = re.findall(r'(?:src|href|action)\s*=\s*["\']?\s*(?:https?:)?//|url\(\s*["\']?(?:https?:)?//|@import|'
                      r'\bfetch\(|XMLHttpRequest|WebSocket|EventSource|sendBeacon', text)
    check(f"{label}: no network reference", not refs, str(refs))
    # The SVG namespace's name is the only address the page holds, and it is never fetched.
    check(f"{label}: no address but the SVG namespace's name",
          set(re.findall(r"https?://[^\s\"'<>)]+", text)) <= {"http://www.w3.org/2000/svg"},
          str(set(re.findall(r"https?://[^\s\"'<>)]+", text))))


def peaks_match(label, dom, report):
    drawn = bars(dom)
    for d in report["devices"]:
        i = d["index"]
        got = drawn.get(i, {})
        check(f"{label}: d{i}'s bars sum to its peak_bytes", sum(got.values()) == d["peak_bytes"],
              f"{sum(got.values())} against {d['peak_bytes']}")
        check(f"{label}: d{i}'s bars are what was in use at its peak", got == nonzero(d["at_peak"]),
              f"{got} against {nonzero(d['at_peak'])}")


def window_matches(label, page, data, run_index, profile, devices, fragment_extra=""):
    """At #t=<the middle of a phase>, the bars are that phase's memory."""
    run_data = data["runs"][run_index]
    windows = [w for w in run_data["windows"] if w["memory"] and w["end"] - w["start"] > 1e-3]
    check(f"{label}: phases with their memory", len(windows) >= 3, str(len(windows)))
    for w in (windows[0], windows[len(windows) // 2], windows[-1]):
        t = (w["start"] + w["end"]) / 2
        dom = loads_cleanly(label, page, f"t={t:.4f}{fragment_extra}", devices, profile)
        drawn = bars(dom)
        for d, m in enumerate(w["memory"]):
            check(f"{label} #t={t:.4f} ({w['phase']} of step {w['step']}): d{d}'s bars are the phase's memory",
                  drawn.get(d, {}) == nonzero(m["at_peak"]), f"{drawn.get(d)} against {nonzero(m['at_peak'])}")


with tempfile.TemporaryDirectory() as tmp:
    profile = os.path.join(tmp, "chromium-profile")

    # ---- dp demo: DataParallel on host:4, the default teaching run
    demo = os.path.join(tmp, "demo.html")
    rc, out, err = run(["demo", "--devices", "host:4", "--html", demo, "--json", os.path.join(tmp, "demo.json")])
    check("demo --html: exit 0", rc == 0, err)
    check("demo --html: says where the page is", f"page: {demo}" in out, out[-300:])
    self_contained("demo", demo)
    data = embedded(demo)
    report = data["runs"][0]["report"]
    check("demo: window.dpReport in memprof's schema",
          {"devices", "timeline", "gpu0_excess", "split", "out_of_memory"} <= set(report), str(sorted(report)))
    demo_json = json.load(open(os.path.join(tmp, "demo.json")))
    check("demo: the page's peaks are the run's (--json)",
          [d["peak_bytes"] for d in report["devices"]] == [m["peak_bytes"] for m in demo_json["memory"]])
    dom = loads_cleanly("demo", demo, "view=peak", 4, profile)
    peaks_match("demo #view=peak", dom, report)
    at_widths("demo", demo, "", 4, profile)
    window_matches("demo", demo, data, 0, profile, 4)
    reduce_windows = {k for k, w in enumerate(data["runs"][0]["windows"]) if w["phase"] == "reduce"}
    into_d0 = {t["from"] for t in data["runs"][0]["transfers"] if t["window"] in reduce_windows and t["to"] == 0}
    check("demo: the reduce's transfers into device 0 from every other device", into_d0 == {1, 2, 3}, str(into_d0))
    check("demo: transfers drawn as arrows", len(dom.with_attr("data-transfer")) == len(data["runs"][0]["transfers"]))
    stories = [w for w in data["runs"][0]["windows"] if "story" in w]
    check("demo: each phase's story and tensors, for the hover panel",
          len(stories) == 9 and all(w["story"]["tensors"] is not None for w in stories), str(len(stories)))
    screenshot(demo, "", "demo.png", profile)

    # ---- dp demo under ZeRO-2: the reduce-scatter on each device's comm row
    zero = os.path.join(tmp, "zero.html")
    rc, out, err = run(["demo", "--devices", "host:3", "--model", "convnet", "--batch", "12", "--sync", "zero2",
                        "--html", zero])
    check("demo zero2 --html: exit 0", rc == 0, err)
    kinds = {(b["device"], b["kind"]) for b in embedded(zero)["runs"][0]["bands"]}
    check("demo zero2: every device's reduce-scatter drawn", {(d, "reduce-scatter") for d in range(3)} <= kinds,
          str(sorted(kinds)))
    loads_cleanly("demo zero2", zero, "", 3, profile)

    # ---- dp memprof with a capacity: the capacity line, the peaks, the phases
    mem = os.path.join(tmp, "mem.html")
    mem_json = os.path.join(tmp, "mem.json")
    rc, out, err = run(["memprof", "--model", "convnet", "--devices", "host:3", "--batch", "24", "--steps", "2",
                        "--device-memory", "64MiB", "--html", mem, "--json", mem_json])
    check("memprof --html: exit 0", rc == 0, err)
    check("memprof --html: named among the outputs", f"--html {mem}" in out, out[-300:])
    self_contained("memprof", mem)
    data = embedded(mem)
    check("memprof: the page's report is the --json report", data["runs"][0]["report"] == json.load(open(mem_json)))
    dom = loads_cleanly("memprof", mem, "view=peak", 3, profile)
    peaks_match("memprof #view=peak", dom, data["runs"][0]["report"])
    check("memprof: a capacity 20x the run's peak: the bars fit the peak, the capacity said above the scale",
          not dom.with_attr("data-capacity") and "above the scale" in dom.text, "")
    dom = loads_cleanly("memprof fit=capacity", mem, "view=peak&fit=capacity", 3, profile)
    caps = dom.with_attr("data-capacity")
    check("memprof #fit=capacity: the capacity line", len(caps) == 1 and int(caps[0]["data-capacity"]) == 64 << 20, str(caps))
    for width, d in at_widths("memprof", mem, "fit=capacity", 3, profile).items():
        check(f"memprof at {width} px: the time and byte axes drawn", {"data-time-step", "data-byte-step"} <= set(d.body()))
        ticks_are_nice(f"memprof at {width} px", d)
    check("memprof: each device's peak marked", len(dom.with_attr("data-peak")) == 3)
    window_matches("memprof", mem, data, 0, profile, 3)
    # The same views on the equal-phases axis.
    window_matches("memprof axis=phases", mem, data, 0, profile, 3, "&axis=phases")

    # ---- gradient accumulation: the micro-batches of a step told apart, each phase's bars the step's
    acc = os.path.join(tmp, "acc.html")
    rc, out, err = run(["memprof", "--model", "convnet", "--devices", "host:2", "--batch", "8", "--steps", "2",
                        "--accumulate", "3", "--html", acc])
    check("memprof --accumulate 3 --html: exit 0", rc == 0, err)
    data = embedded(acc)
    got = [(w["step"], w["micro"]) for w in data["runs"][0]["windows"] if w["phase"] == "load"]
    check("accumulate: a step's three micro-batches, two steps", got == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)],
          got)
    window_matches("memprof --accumulate 3", acc, data, 0, profile, 2)
    demo_acc = os.path.join(tmp, "demo-acc.html")
    rc, out, err = run(["demo", "--accumulate", "3", "--html", demo_acc])
    told = {(w["step"], w["micro"]) for w in embedded(demo_acc)["runs"][0]["windows"] if "story" in w}
    check("demo --accumulate 3: each micro-batch's phases told on the page", rc == 0 and told == {(1, 1), (1, 2), (1, 3)},
          (rc, sorted(told), err[-300:]))

    # ---- dp memprof that runs out of memory: the page is still written, at the peaks
    oom = os.path.join(tmp, "oom.html")
    rc, out, err = run(["memprof", "--model", "convnet", "--devices", "host:2", "--batch", "32",
                        "--device-memory", "1MiB", "--html", oom])
    check("memprof out of memory: exit 3, the page written", rc == 3 and os.path.exists(oom), f"exit {rc}: {err}")
    if os.path.exists(oom):
        dom = loads_cleanly("memprof out of memory", oom, "", 2, profile)
        peaks_match("memprof out of memory (opens at the peaks)", dom, embedded(oom)["runs"][0]["report"])
    oom2 = os.path.join(tmp, "oom2.html")
    rc, out, err = run(["memprof", "--model", "resnet8", "--devices", "host:4", "--batch", "64", "--device-memory",
                        "12MiB", "--html", oom2])
    check("memprof out of memory in a later phase: exit 3, the page written", rc == 3 and os.path.exists(oom2), err)
    if os.path.exists(oom2):
        data = embedded(oom2)
        failed = data["runs"][0]["report"]["out_of_memory"]
        windows = data["runs"][0]["windows"]
        check("out of memory: the report names the phase, step and bytes in use",
              failed.get("phase") in ("forward", "backward", "loss", "gather") and failed.get("step") == 1
              and failed.get("in_use_bytes", 0) > 0, str(failed))
        check("out of memory: the timeline reaches the phase it failed in", windows and windows[-1].get("failed")
              and windows[-1]["phase"] == failed.get("phase"), str(windows[-2:]))
        dom = loads_cleanly("memprof out of memory (a later phase)", oom2, "", 4, profile)
        headline = dom.inner("headline")
        check("out of memory: the headline says where, in which phase, asking for what",
              f"ran out in {failed.get('phase')} of step 1" in headline and "asking for" in headline
              and "12.00 MiB" in headline, headline)
        check("out of memory: the excess words do not repeat the error", "Out of memory" not in dom.inner("excess"),
              dom.inner("excess"))
        at_widths("memprof out of memory", oom2, "", 4, profile)
    # Device 0's excess in words: every category that differs, both signs (device 0 takes fewer samples here)
    gpu0 = os.path.join(tmp, "gpu0.html")
    rc, out, err = run(["memprof", "--model", "convnet", "--devices", "host:2", "--batch", "32", "--split", "gpu0:4",
                        "--html", gpu0])
    if rc == 0:
        words = loads_cleanly("memprof gpu0:4", gpu0, "view=peak", 2, profile).inner("excess")
        check("excess: parts of both signs listed", "+" in words and "−" in words, words)

    # ---- dp plan --compare: a strategy selector; the fragment switches the bars
    plan = os.path.join(tmp, "plan.html")
    plan_json = os.path.join(tmp, "plan.json")
    rc, out, err = run(["plan", "--model", "resnet8", "--devices", "meta:4", "--batch", "64", "--compare",
                        "--html", plan, "--json", plan_json])
    check("plan --compare --html: exit 0", rc == 0, err)
    self_contained("plan --compare", plan)
    data = embedded(plan)
    rows = json.load(open(plan_json))["compare"]
    check("plan --compare: a run per strategy", [r["name"] for r in data["runs"]] == [r["strategy"] for r in rows])
    seen = {}
    for name in ("DataParallel", "DDP (allreduce)", "ZeRO-3", "ZeRO-2, bf16"):
        row = next(r for r in rows if r["strategy"] == name)
        dom = loads_cleanly(f"plan {name}", plan, "view=peak&strategy=" + name.replace(" ", "%20"), 4, profile)
        peaks_match(f"plan #strategy={name}", dom, row["report"])
        seen[name] = bars(dom)
    check("plan: the strategies' bars differ (DataParallel against ZeRO-3)", seen["DataParallel"] != seen["ZeRO-3"])
    check("plan: the strategies' bars differ (DDP against ZeRO-2, bf16)", seen["DDP (allreduce)"] != seen["ZeRO-2, bf16"])
    # A strategy named loosely (case and punctuation aside) is found too.
    dom = loads_cleanly("plan zero-3", plan, "view=peak&strategy=zero-3", 4, profile)
    check("plan: #strategy=zero-3 is ZeRO-3", bars(dom) == seen["ZeRO-3"])
    window_matches("plan ZeRO-1", plan, data, [r["name"] for r in data["runs"]].index("ZeRO-1"), profile, 4,
                   "&strategy=ZeRO-1")
    dom = loads_cleanly("plan compare table", plan, "strategy=ZeRO-2", 4, profile)
    table = dom.inner("compare")
    selected = [a for t, a in dom.elements if t == "tr" and a.get("aria-selected") == "true"]
    check("plan --compare: the table on the page, a row a strategy, the shown one selected",
          all(r["strategy"] in table for r in rows) and "model state" in table and len(selected) == 1
          and selected[0].get("data-run") == str([r["name"] for r in data["runs"]].index("ZeRO-2")), table[:300])
    at_widths("plan --compare", plan, "strategy=ZeRO-2", 4, profile)
    screenshot(plan, "view=peak&strategy=ZeRO-2", "plan-compare.png", profile)

    # ---- eight devices on one screen, the plan of one run
    wide = os.path.join(tmp, "wide.html")
    rc, out, err = run(["plan", "--model", "resnet8", "--devices", "meta:8", "--batch", "64", "--html", wide])
    check("plan meta:8 --html: exit 0", rc == 0, err)
    dom = loads_cleanly("plan meta:8", wide, "view=peak", 8, profile)
    peaks_match("plan meta:8 #view=peak", dom, embedded(wide)["runs"][0]["report"])
    doms = at_widths("plan meta:8", wide, "", 8, profile)
    phases = len(embedded(wide)["runs"][0]["windows"])
    check("plan meta:8 at 1400 px: every phase labelled (in full or short)",
          doms[1400].body().get("data-phase-labels") == str(phases), (doms[1400].body().get("data-phase-labels"), phases))
    for width, d in doms.items():
        check(f"plan meta:8 at {width} px: the scatter's and the replicas' arrows to 8 devices cross none another",
              d.body().get("data-transfer-crossings") == "0", str(d.body().get("data-transfer-crossings")))
        clock = d.inner("clock")
        check(f"plan meta:8 at {width} px: the cursor's place in words, a whole phase of the step's phases",
              re.fullmatch(r"step \d+, [a-z-]+.* \(phase \d+ of \d+\)", clock) is not None, clock)
    screenshot(wide, "", "plan-8-devices.png", profile)

    # ---- refusals: nothing written
    rc, out, err = run(["memprof", "--model", "convnet", "--devices", "host:2", "--html", "/proc/dp.html"])
    check("--html to a place that cannot be written: exit 2 naming --html", rc == 2 and "--html" in err, err)
    rc, out, err = run(["plan", "--model", "convnet", "--compare", "--svg", os.path.join(tmp, "x.svg")])
    check("plan --compare --svg: refused, naming what --compare writes", rc == 2 and "--html" in err, err)

CLI.finish()
