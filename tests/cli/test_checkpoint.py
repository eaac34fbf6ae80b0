"""Checkpoints and exact resume, end to end:
- a run resumed from any checkpoint ends bitwise equal (weights, buffers, per-step losses) to the
  run never interrupted, for SGD and for AdamW with a schedule and clipping (also with captured
  steps, --cuda-graphs on, which train the same bits), across epochs and short last batches; with
  --split auto, the resumed run splits as the original would have; with --accumulate, whose
  steps (and checkpoints) are optimizer steps of several batches;
- Ctrl-C / SIGTERM: the step finishes, a checkpoint is written, metrics intact, exit 130 / 143,
  the last line says how to resume;
- SIGKILL at many moments while checkpointing: --resume always finds a whole checkpoint and never
  takes a temporary for one;
- bad input: flags, missing / truncated / mismatched files, a damaged newest checkpoint.

usage: test_checkpoint.py DP_BINARY
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Cli, write_mnist_like  # noqa: E402

CLI = Cli()
DP, check, run, expect = CLI.dp, CLI.check, CLI.run, CLI.expect


def write_idx(d, prefix, n):
    write_mnist_like(d, prefix, n)


def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"step"' in l]


def chunks(path):
    return [json.loads(l)["chunks"] for l in open(path) if '"step"' in l]


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    write_idx(data, "train", 50)  # batch 8: 7 steps an epoch, the 7th of 2 samples
    write_idx(data, "t10k", 10)
    base = ["train", "--data", data, "--devices", "host:2", "--batch", "8", "--epochs", "2", "--model", "mlp"]

    # ---- exact resume (and with captured steps: a resumed run captures afresh, the same bits)
    adamw = ["--optimizer", "adamw", "--lr", "0.002", "--lr-schedule", "cosine", "--warmup-steps", "3",
             "--clip-grad-norm", "0.5"]
    for name, flags in [("sgd", ["--lr", "0.05", "--momentum", "0.9"]), ("adamw", adamw),
                        ("adamw-graphs", adamw + ["--cuda-graphs", "on"])]:
        ck = os.path.join(tmp, f"ck-{name}")
        whole_st, whole_m = os.path.join(tmp, f"{name}.st"), os.path.join(tmp, f"{name}.jsonl")
        rc, _, err = run(base + flags + ["--checkpoint", ck, "--checkpoint-every", "3", "--keep-checkpoints", "10",
                                         "--save", whole_st, "--metrics", whole_m])
        check(f"{name}: uninterrupted run", rc == 0, err)
        names = sorted(os.listdir(ck))
        check(f"{name}: checkpoints every 3 steps and at the end", names == [f"step-{s:08d}" for s in (3, 6, 9, 12, 14)],
              names)
        state = json.load(open(os.path.join(ck, "step-00000009", "state.json")))
        check(f"{name}: state.json", state["step"] == 9 and state["epoch"] == 2 and state["position_in_epoch"] == 2 and
              state["format"] == 1 and state["model"] == "mlp" and "command" in state and "split" in state, state)
        check(f"{name}: every flag's value recorded by keyword", state["settings"]["batch"] == 8 and
              state["settings"]["model"] == "mlp" and state["settings"]["epochs"] == 2, state.get("settings"))
        want = losses(whole_m)
        for at in (3, 9):
            st, m = os.path.join(tmp, f"{name}-{at}.st"), os.path.join(tmp, f"{name}-{at}.jsonl")
            rc, _, err = run(base + flags + ["--resume", os.path.join(ck, f"step-{at:08d}"), "--save", st,
                                             "--metrics", m])
            check(f"{name}: resumed at step {at}", rc == 0 and f"at step {at}" in err, err)
            check(f"{name}: resumed at {at}: bitwise the same weights", open(st, "rb").read() == open(whole_st, "rb").read())
            check(f"{name}: resumed at {at}: the same losses", losses(m) == want[at:], (losses(m), want[at:]))

    check("adamw: --cuda-graphs on trains the same bits as off",
          open(os.path.join(tmp, "adamw.st"), "rb").read() == open(os.path.join(tmp, "adamw-graphs.st"), "rb").read())

    # Gradient accumulation: a step is an optimizer step (here 2 batches; an epoch's 7 batches make
    # 4 steps, the last of one batch), checkpoints fall between them, and resuming is exact.
    acc = base + ["--lr", "0.05", "--momentum", "0.9", "--accumulate", "2"]
    ck, whole_st, whole_m = (os.path.join(tmp, n) for n in ("ck-acc", "acc.st", "acc.jsonl"))
    rc, _, err = run(acc + ["--checkpoint", ck, "--checkpoint-every", "3", "--keep-checkpoints", "10",
                            "--save", whole_st, "--metrics", whole_m])
    rows = [json.loads(l) for l in open(whole_m) if '"step"' in l] if rc == 0 else []
    check("accumulate: the run", rc == 0 and [r["micro_batches"] for r in rows] == [2, 2, 2, 1] * 2 and
          [r["epoch"] for r in rows] == [1] * 4 + [2] * 4, (err[-300:], rows[:1]))
    check("accumulate: checkpoints by optimizer steps", sorted(os.listdir(ck)) == [f"step-{s:08d}" for s in (3, 6, 8)],
          os.listdir(ck))
    state = json.load(open(os.path.join(ck, "step-00000006", "state.json")))
    check("accumulate: state.json", state["epoch"] == 2 and state["position_in_epoch"] == 2 and state["accumulate"] == 2,
          state)
    for at in (3, 6):
        st, m = os.path.join(tmp, f"acc-{at}.st"), os.path.join(tmp, f"acc-{at}.jsonl")
        rc, _, err = run(acc + ["--resume", os.path.join(ck, f"step-{at:08d}"), "--save", st, "--metrics", m])
        check(f"accumulate: resumed at {at}: bitwise the same weights and losses", rc == 0 and
              open(st, "rb").read() == open(whole_st, "rb").read() and losses(m) == losses(whole_m)[at:], err[-300:])
    expect("accumulate: resumed with another count", acc[:-1] + ["3", "--resume", ck], 1, "made with accumulate 2")
    expect("accumulate: resumed without it", acc[:-2] + ["--resume", ck], 1, "(add --accumulate 2)")
    expect("accumulate: a plain checkpoint resumed with it", acc + ["--resume", os.path.join(tmp, "ck-sgd")], 1,
           "made with accumulate (none)")
    expect("--accumulate 0", acc[:-1] + ["0"], 2, "--accumulate must be >= 1")

    # Resuming from the parent directory takes the newest.
    rc, _, err = run(base + ["--resume", os.path.join(tmp, "ck-sgd"), "--epochs", "3"])
    check("resume from the parent: the newest", rc == 0 and "step-00000014" in err, err)

    # --split auto: the resumed run splits as the original would have at that step.
    auto = ["train", "--data", data, "--devices", "host:2", "--device-speed", "1,0.25", "--split", "auto",
            "--batch", "8", "--epochs", "2", "--model", "mlp"]
    ck = os.path.join(tmp, "ck-auto")
    am, bm = os.path.join(tmp, "auto-a.jsonl"), os.path.join(tmp, "auto-b.jsonl")
    ast, bst = os.path.join(tmp, "auto-a.st"), os.path.join(tmp, "auto-b.st")
    rc, _, err = run(auto + ["--checkpoint", ck, "--checkpoint-every", "5", "--keep-checkpoints", "5", "--metrics", am,
                             "--save", ast])
    state = json.load(open(os.path.join(ck, "step-00000005", "state.json")))
    check("auto: its measured speeds are in the checkpoint", rc == 0 and "auto" in state["split"], state.get("split"))
    rc, _, err = run(auto + ["--resume", os.path.join(ck, "step-00000005"), "--metrics", bm, "--save", bst])
    check("auto: resumed", rc == 0, err)
    check("auto: the first resumed step splits as the original's step 6", chunks(bm)[0] == chunks(am)[5],
          (chunks(bm)[:1], chunks(am)[5:6]))
    if chunks(bm) == chunks(am)[5:]:
        check("auto: the same splits give bitwise the same weights", open(ast, "rb").read() == open(bst, "rb").read())
    check("auto: the policy is recorded as typed fields and as text",
          state["split"].get("mode") == "auto" and state["split"].get("policy") == "auto", state.get("split"))
    # A checkpoint recorded before the typed fields (the policy as text only) resumes the same way;
    # one recorded under another policy does not hand its speeds to this one.
    for name, record, same in [("text only", {"policy": "auto"}, True), ("another policy", {"mode": "even"}, False)]:
        old = os.path.join(tmp, "ck-auto-" + name.replace(" ", "-"), "step-00000005")
        shutil.copytree(os.path.join(ck, "step-00000005"), old)
        st = json.load(open(os.path.join(old, "state.json")))
        st["split"] = {**{k: v for k, v in st["split"].items() if k not in ("mode", "policy")}, **record}
        json.dump(st, open(os.path.join(old, "state.json"), "w"))
        om = os.path.join(tmp, "auto-" + name.replace(" ", "-") + ".jsonl")
        rc, _, err = run(auto + ["--resume", old, "--metrics", om])
        check(f"auto, a record with {name}: resumed", rc == 0, err)
        check(f"auto, a record with {name}: its speeds " + ("restored" if same else "not taken"),
              (chunks(om)[0] == chunks(bm)[0]) == same, (chunks(om)[:1], chunks(bm)[:1]))

    # ---- Ctrl-C and SIGTERM
    slow = ["train", "--model", "mlp", "--devices", "host:2", "--batch", "64", "--steps", "100000", "--generated-size",
            "6400", "--device-speed", "0.05,0.05", "--epochs", "1000"]
    def interrupted(ck, m, signals, after_steps):
        """A slow run signalled (each of `signals` at once) once `after_steps` steps are in the metrics."""
        p = subprocess.Popen([DP] + slow + ["--checkpoint", ck, "--metrics", m], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and (not os.path.exists(m) or len(losses(m)) < after_steps):
            time.sleep(0.05)
        for sig in signals:
            p.send_signal(sig)
        out, err = p.communicate(timeout=120)
        return p, err

    for sig, code in [(signal.SIGINT, 130), (signal.SIGTERM, 143)]:
        ck, m = os.path.join(tmp, f"ck-sig{code}"), os.path.join(tmp, f"sig{code}.jsonl")
        p, err = interrupted(ck, m, [sig], 3)
        done = len(losses(m))
        rows_ok = all(json.loads(l) for l in open(m))
        names = os.listdir(ck) if os.path.isdir(ck) else []
        check(f"signal {sig.name}: exit {code}", p.returncode == code, (p.returncode, err[-400:]))
        check(f"signal {sig.name}: a checkpoint at the last finished step", names == [f"step-{done:08d}"], (names, done))
        check(f"signal {sig.name}: metrics whole", rows_ok and done >= 3)
        check(f"signal {sig.name}: the last line says how to resume", "--resume " + ck in err.strip().splitlines()[-1],
              err[-300:])

    # ---- one press signalled twice (timeout -s INT, job schedulers: the process and its group), a
    # few microseconds apart: the same press, so the run still finishes its step and checkpoints.
    for attempt in range(3):
        ck, m = os.path.join(tmp, f"ck-twice{attempt}"), os.path.join(tmp, f"twice{attempt}.jsonl")
        p, err = interrupted(ck, m, [signal.SIGINT, signal.SIGINT], 2)
        check(f"two SIGINTs at once (try {attempt + 1}): one press, exit 130 with a checkpoint",
              p.returncode == 130 and "--resume " + ck in err and os.listdir(ck) == [f"step-{len(losses(m)):08d}"],
              (p.returncode, err[-400:]))
    # A second press later: the run ends at once, and still says in one line what was saved.
    # Both presses land inside step 2 (several seconds at this speed), after step 1's line: a press
    # timed from the start could meet a step boundary on a loaded machine, and the run would then
    # checkpoint and end before the second press came.
    ck = os.path.join(tmp, "ck-second-press")
    p = subprocess.Popen([DP] + ["train", "--model", "resnet8", "--devices", "host:2", "--batch", "32", "--steps", "50",
                                 "--device-speed", "0.02,0.02", "--checkpoint", ck], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    err_lines = []
    for line in p.stderr:
        err_lines.append(line)
        if line.startswith("step 1/"):
            break
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    time.sleep(0.6)  # past kSamePressNs (0.3 s): a second press, not the same one
    p.send_signal(signal.SIGINT)
    _, rest = p.communicate(timeout=120)
    err = "".join(err_lines) + rest
    check("a second press: the process ends by the signal", p.returncode in (-signal.SIGINT, 130), (p.returncode, err))
    check("a second press: one line says what was saved", err.strip().splitlines()[-1] ==
          "interrupted again: stopped at once; no checkpoint was written yet", err[-400:])
    check("a second press: nothing half-written left", not os.path.isdir(ck) or
          not [n for n in os.listdir(ck) if n.startswith(".tmp-")], os.listdir(ck) if os.path.isdir(ck) else None)

    # ---- SIGKILL while checkpointing: never a half checkpoint taken for one
    ck = os.path.join(tmp, "ck-kill")
    kill_run = ["train", "--model", "mlp", "--devices", "host:2", "--batch", "16", "--generated-size", "4000",
                "--steps", "200", "--checkpoint", ck, "--checkpoint-every", "1", "--keep-checkpoints", "2"]
    rng = random.Random(5)
    bad = []
    for attempt in range(16):
        # Like a job restarted after each crash: it resumes whatever the last one left.
        resume = ["--resume", ck] if os.path.isdir(ck) and [n for n in os.listdir(ck) if n.startswith("step-")] else []
        p = subprocess.Popen([DP] + kill_run + resume, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.5))
        p.kill()
        p.wait()
        if not os.path.isdir(ck) or not [n for n in os.listdir(ck) if n.startswith("step-")]:
            continue
        rc, _, err = run(["train", "--model", "mlp", "--devices", "host:2", "--batch", "16", "--generated-size", "4000",
                          "--steps", "200", "--resume", ck, "--steps", "1000"])
        if rc != 0 or ".tmp-" in err:
            bad.append((attempt, rc, err[-300:]))
    check("after SIGKILL, --resume always finds a whole checkpoint", bad == [], bad)
    tmps = [n for n in os.listdir(ck) if n.startswith(".tmp-")] if os.path.isdir(ck) else []
    if tmps:
        expect_tmp = subprocess.run([DP] + kill_run + ["--resume", os.path.join(ck, tmps[0])], capture_output=True,
                                    text=True)
        check("a temporary is refused as a checkpoint", expect_tmp.returncode != 0 and "temporary" in expect_tmp.stderr)

    # ---- bad input
    good_ck = os.path.join(tmp, "ck-sgd")
    expect("--checkpoint-every 0", base + ["--checkpoint", os.path.join(tmp, "x"), "--checkpoint-every", "0"], 2,
           "--checkpoint-every")
    expect("--keep-checkpoints 0", base + ["--checkpoint", os.path.join(tmp, "x"), "--keep-checkpoints", "0"], 2,
           "--keep-checkpoints")
    afile = os.path.join(tmp, "afile")
    open(afile, "w").write("x")
    expect("--checkpoint is a file", base + ["--checkpoint", afile], 2, "not a directory")
    expect("a fresh run over another run's checkpoints", base + ["--checkpoint", good_ck], 2, "already holds checkpoints")
    expect("--checkpoint unwritable", base + ["--checkpoint", "/proc/dp-no"], 2, "--checkpoint")
    expect("--resume missing", base + ["--resume", os.path.join(tmp, "none")], 2, "not a directory")
    expect("--resume another model", ["train", "--data", data, "--model", "convnet", "--batch", "8", "--resume", good_ck],
           1, "made with model \"mlp\"")
    expect("--resume another optimizer", base + ["--optimizer", "adamw", "--resume", good_ck], 1,
           "made with optimizer \"sgd\"")
    broken = os.path.join(tmp, "broken")
    shutil.copytree(good_ck, broken)
    newest, previous = os.path.join(broken, "step-00000014"), os.path.join(broken, "step-00000012")
    os.remove(os.path.join(newest, "optimizer.safetensors"))
    # The directory: the newest damaged checkpoint skipped, named with why, the run resumed from the
    # newest intact one (and ends as the good run ended).
    rc, out, err = run(base + ["--resume", broken, "--save", os.path.join(tmp, "from-previous.safetensors")])
    check("a damaged newest checkpoint: skipped, named with why", rc == 0 and
          f"skipped the damaged checkpoint {newest}" in err and "optimizer.safetensors" in err, err)
    check("a damaged newest checkpoint: resumed from the previous one", f"resuming from {previous}" in err, err)
    # Named itself: a clear error naming the file and what lies beside it, exit 2.
    expect("a missing file, named", base + ["--resume", newest], 2, "optimizer.safetensors")
    expect("a damaged checkpoint named: what lies beside it", base + ["--resume", newest], 2,
           "beside it: step-00000012")
    model_file = os.path.join(previous, "model.safetensors")
    open(model_file, "r+b").truncate(os.path.getsize(model_file) // 2)
    expect("a truncated file", base + ["--resume", previous], 2, "model.safetensors")
    rc, out, err = run(base + ["--resume", broken])
    check("two damaged: the third newest taken", rc == 0 and err.count("skipped the damaged checkpoint") == 2, err)
    state_file = os.path.join(newest, "state.json")
    state = json.load(open(state_file))
    # A state.json field of another type than dp writes: the file and the field named, exit 2 (it
    # gave nlohmann's raw type error, or resumed with a seed of [1]).
    for key, value, want in (("step", "x", "a whole number >= 0"), ("seed", [1], "a whole number >= 0"),
                             ("epoch", {}, "a whole number >= 0"), ("optimizer", 7, "a name"),
                             ("best_eval", {"test_loss": "low"}, '{"test_loss": a number')):
        json.dump(dict(state, **{key: value}), open(state_file, "w"))
        expect(f"state.json's {key} of another type", base + ["--resume", newest], 2,
               f'state.json: "{key}" is {json.dumps(value, separators=(",", ":"))}, not {want}')
    state["format"] = 99
    json.dump(state, open(state_file, "w"))
    expect("another format", base + ["--resume", newest], 1, "checkpoint format 99")
    every = os.path.join(tmp, "every-damaged")
    os.makedirs(every)
    shutil.copytree(previous, os.path.join(every, "step-00000012"))
    expect("every checkpoint damaged", base + ["--resume", every], 1, "every checkpoint in it is damaged")

    # ---- a checkpoint that cannot be written (a file-size limit, as a full disk would): one error
    # naming the path and the cause, the checkpoints written before untouched, nothing half-written
    # left; the run stops (exit 1) or, with --checkpoint-errors warn, trains on.
    import resource

    def limited(args, limit=1 << 20):
        def set_limit():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        p = subprocess.run([DP] + args, capture_output=True, text=True, timeout=300, preexec_fn=set_limit)
        return p.returncode, p.stdout, p.stderr

    fault = os.path.join(tmp, "ck-fault")
    small = ["train", "--model", "mlp", "--devices", "host:2", "--batch", "16", "--generated-size", "320",
             "--checkpoint", fault, "--checkpoint-every", "3"]
    rc, _, err = run(small + ["--steps", "6"])
    before = sorted(os.listdir(fault))
    check("faults: the checkpoints before", rc == 0 and before == ["step-00000003", "step-00000006"], (before, err))
    saved = {n: open(os.path.join(fault, "step-00000006", n), "rb").read()
             for n in os.listdir(os.path.join(fault, "step-00000006"))}
    rc, out, err = limited(small + ["--steps", "12", "--resume", fault])
    check("a checkpoint that cannot be written stops the run: exit 1", rc == 1, (rc, err[-500:]))
    check("... naming the checkpoint, the file and the cause",
          f"checkpoint {fault}/step-00000009 not written" in err and "model.safetensors: File too large" in err, err)
    check("... at the next step, not the end", "trained" not in out, out[-300:])
    check("... the checkpoints before untouched, nothing half-written left", sorted(os.listdir(fault)) == before and
          all(open(os.path.join(fault, "step-00000006", n), "rb").read() == b for n, b in saved.items()),
          sorted(os.listdir(fault)))
    rc, out, err = limited(small + ["--steps", "12", "--resume", fault, "--checkpoint-errors", "warn"])
    check("--checkpoint-errors warn: trains on to the end", rc == 0 and "trained 6 steps" in out, (rc, err[-600:]))
    check("--checkpoint-errors warn: a warning per checkpoint not written",
          err.count("warning: checkpoint") == 2 and "training goes on" in err, err)
    check("--checkpoint-errors warn: nothing half-written left", sorted(os.listdir(fault)) == before,
          sorted(os.listdir(fault)))
    rc, _, err = run(small + ["--steps", "12", "--resume", fault])
    check("faults: the checkpoint before still resumes", rc == 0 and "resuming from" in err and "step-00000006" in err,
          err[-300:])
    expect("--checkpoint-errors: a bad value", base + ["--checkpoint-errors", "ignore"], 2,
           "--checkpoint-errors must be stop or warn")

CLI.finish()
