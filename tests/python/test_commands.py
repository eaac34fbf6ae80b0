"""dp_engine's commands against the CLI's: the same plan to the byte, the same settings (keywords as the
flags, their defaults, checks and messages), errors as exceptions, results as objects."""
import json
import os
import re

import pytest

import dp_engine as dp


def test_version_names_the_release_and_the_commit():
    assert re.fullmatch(r"\d+\.\d+\.\d+\+[0-9a-z.]+", dp.__version__), dp.__version__


def test_the_plan_is_the_clis_to_the_byte(cli, tmp_path):
    report = tmp_path / "plan.json"
    printed = cli("plan", "--model", "convnet", "--devices", "meta:4", "--batch", "256", "--split", "ratios:4,1,1,1",
                  "--json", report).stdout
    plan = dp.plan("convnet", devices="meta:4", batch=256, split="ratios:4,1,1,1")
    assert plan.report == json.loads(report.read_text())
    # the printed table the same, less the line naming the --json file the CLI was given (the call's
    # own scratch files go unsaid)
    assert printed.splitlines()[-1].startswith("wrote: --json ")
    assert plan.text.splitlines() == printed.splitlines()[:-1]
    assert plan.peak(0) == plan.report["devices"][0]["peak_bytes"] > plan.peak(1)
    assert sum(plan.at_peak(0).values()) == plan.peak(0)


def test_plan_rows_and_pandas(tmp_path):
    plan = dp.plan("mlp", devices="meta:2", batch=64)
    rows = plan.table()
    assert {"step", "phase", "device", "category", "bytes"} == set(rows[0])
    peak0 = max(sum(r["bytes"] for r in rows if r["device"] == 0 and r["step"] == s and r["phase"] == p)
                for s, p in {(r["step"], r["phase"]) for r in rows})
    assert peak0 == plan.peak(0)
    pandas = pytest.importorskip("pandas")
    frame = plan.to_pandas()
    assert isinstance(frame, pandas.DataFrame) and len(frame) == len(rows)
    page = plan.html(tmp_path / "plan.html")
    assert open(page).read() == plan.page and "<html" in plan.page.lower()
    assert plan._repr_html_().startswith("<iframe srcdoc=")


def test_compare_lists_every_strategy():
    plan = dp.plan("mlp", devices="meta:2", batch=64, compare=True)
    strategies = plan.strategies()
    assert len(strategies) >= 5 and strategies[0]["strategy"] == "DataParallel"
    assert plan.peak(0) == strategies[0]["device0_peak_bytes"]


def test_memprof_measures_the_run():
    profile = dp.memprof("mlp", devices="host:2", batch=32, steps=2)
    assert profile.peak(0) > profile.peak(1) > 0
    assert profile.report["devices"][0]["name"] == "host:0"


def test_demo_and_devices():
    demo = dp.demo()
    assert demo.report["model"] and "<html" in demo.page.lower() and "scatter" in demo.text
    assert "host:" in repr(dp.devices())


def test_an_unknown_keyword_names_the_closest():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'bach'; did you mean 'batch'\?"):
        dp.plan("mlp", bach=64)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sample'"):
        dp.plan("mlp", sample=10)  # dp train's flag, not dp plan's


def test_a_keyword_of_the_wrong_kind_is_a_type_error():
    with pytest.raises(TypeError, match="batch takes a whole number"):
        dp.plan("mlp", batch=6.5)
    with pytest.raises(TypeError, match="compare is a switch"):
        dp.plan("mlp", compare="yes")


def test_a_bad_setting_is_the_clis_message(cli):
    expected = cli("plan", "--model", "mlp", "--devices", "meta:2", "--split", "ratios:1", check=False)
    assert expected.returncode == 2
    with pytest.raises(dp.DpError) as raised:
        dp.plan("mlp", devices="meta:2", split="ratios:1")
    assert raised.value.exit_code == 2
    assert expected.stderr.strip() == "error: " + raised.value.message


def test_out_of_memory_carries_the_remedies():
    with pytest.raises(dp.OutOfMemoryError) as raised:
        dp.memprof("convnet", devices="host:2", batch=512, device_memory="2MiB", steps=1)
    assert raised.value.exit_code == 3 and "out of memory" in raised.value.message
    # the CLI's remedies, each planned for this run
    assert raised.value.remedies.startswith("remedies, each planned for this run") and "--batch " in raised.value.remedies


def test_defaults_are_the_clis():
    from dp_engine import flags
    plan, train = flags.defaults("plan"), flags.defaults("train")
    assert plan["devices"] == "meta:2" and plan["steps"] == 2 and train["batch"] == 128 and train["lr"] == pytest.approx(0.05)


def test_a_missing_data_path_is_a_usage_error(tmp_path):
    with pytest.raises(dp.DpError, match="no such file or directory") as raised:
        dp.train("mlp", data=os.path.join(tmp_path, "nowhere"), devices="host:1", steps=1)
    assert raised.value.exit_code == 2
