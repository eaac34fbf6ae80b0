"""The other forms a call takes: dp eval of a module against the command line's of its weights, a
TensorDataset as a pair, a run's summary page, a model file by path, keywords that name files."""
import json
import os

import numpy as np
import pytest

import dp_engine as dp

torch = pytest.importorskip("torch")


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2 * 6 * 6, 3)

    def forward(self, x):
        return self.fc(torch.flatten(x, 1))


def arrays(n, seed):
    rng = np.random.default_rng(seed)
    return rng.random((n, 2, 6, 6), dtype=np.float32), rng.integers(0, 3, n)


def test_eval_of_a_module_is_the_clis_of_its_weights(cli, tmp_path):
    torch.manual_seed(1)
    net = Tiny()
    (x, y), (tx, ty) = arrays(32, 1), arrays(20, 2)
    from dp_engine.models import export_module
    model, weights, _ = export_module(net, (2, 6, 6), str(tmp_path))
    data = tmp_path / "data"
    data.mkdir()
    for name, array in (("train_images", x), ("train_labels", y), ("val_images", tx), ("val_labels", ty)):
        np.save(data / f"{name}.npy", array)
    report = tmp_path / "eval.json"
    cli("eval", "--model", model, "--weights", weights, "--data", data, "--devices", "host:2", "--json", report)
    expected = json.loads(report.read_text())
    got = dp.eval(net, data=(x, y), test_data=(tx, ty), devices="host:2").report
    for key in ("test_loss", "test_accuracy", "test_targets"):
        assert got[key] == expected[key], key


def test_a_tensor_dataset_is_its_pair(tmp_path):
    from torch.utils.data import TensorDataset
    x, y = arrays(32, 3)
    runs = []
    for data in ((x, y), TensorDataset(torch.from_numpy(x), torch.from_numpy(y))):
        torch.manual_seed(2)
        runs.append(dp.train(Tiny(), data=data, devices="host:2", batch=8, steps=3))
    assert {k: v.tobytes() for k, v in runs[0].weights.items()} == {k: v.tobytes() for k, v in runs[1].weights.items()}


def test_files_named_by_keywords_are_written(tmp_path):
    x, y = arrays(32, 4)
    metrics, save = tmp_path / "m.jsonl", tmp_path / "w.safetensors"
    torch.manual_seed(3)
    run = dp.train(Tiny(), data=(x, y), devices="host:1", batch=8, steps=2, metrics=str(metrics), save=save)
    assert len(metrics.read_text().splitlines()) == 2 and save.exists()
    assert "saved " + str(save) in run.text  # the user's file is said, as the CLI says it
    page = run.html(tmp_path / "run.html")
    assert "<table>" in open(page).read() and "last loss" in open(page).read()
    plan = dp.plan("mlp", devices="meta:2", json=str(tmp_path / "p.json"))
    assert json.loads((tmp_path / "p.json").read_text()) == plan.report and "wrote: --json" in plan.text


def test_a_model_file_by_path(tmp_path):
    torch.manual_seed(4)
    from dp_engine.models import export_module
    model, _, _ = export_module(Tiny(), (2, 6, 6), str(tmp_path))
    assert dp.plan(model, devices="meta:2", batch=16).peak(0) == dp.plan(Tiny(), input=(2, 6, 6), devices="meta:2",
                                                                        batch=16).peak(0)
    with pytest.raises(TypeError, match="input= 2x6: give one sample's shape as CxHxW"):  # the exporter's words
        dp.plan(Tiny(), input="2x6", devices="meta:2")
    text = repr(dp.plan(Tiny(), input="2x6x6", devices="meta:2"))
    assert "dp plan: Tiny.json" in text and "dp_engine-" not in text  # the module by name, not its scratch folder


def peak_growth(first, measured):
    """How much the peak resident memory of a fresh Python grows while `measured` runs (after `first`
    has set up what every run needs); both are lines of code with numpy as np and dp_engine as dp."""
    import subprocess
    import sys
    import dp_engine
    code = ("import resource, numpy as np, dp_engine as dp\n" + first + "\n"
            "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
            "before = peak()\n" + measured + "\nprint(peak() - before)\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(dp_engine.__file__))))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return int(p.stdout.split()[-1])


def test_arrays_are_read_where_they_are():
    """A data set of 235 MB handed over and trained on: the process's peak grows by less than a copy of it
    would add."""
    grown = peak_growth("dp.train('mlp', data=(np.ones((640, 1, 28, 28), np.uint8), np.arange(640) % 10), "
                        "devices='host:1', batch=64, steps=2)\n"
                        "x = np.zeros((300000, 1, 28, 28), np.uint8); x[:, 0, 0, 0] = 1; y = np.arange(300000) % 10",
                        "dp.train('mlp', data=(x, y), devices='host:1', batch=64, steps=2)")
    assert grown < 100 * 2**20, grown / 2**20  # not another 235 MB


def test_uint16_token_ids_are_read_where_they_are():
    """200 MB of uint16 token ids (nanoGPT's train.bin as np.memmap gives them) trained on without a copy
    (ids of another integer type are copied, as uint16)."""
    run = ("def run(ids):\n"
           "    dp.train('gpt', data=ids, test_data=ids[:4096], devices='host:1', batch=4, steps=1, gpt_layers=1,\n"
           "             gpt_dim=32, gpt_heads=2, context=16)")
    grown = peak_growth(run + "\nrun(np.arange(65536, dtype=np.uint16) % 64)\n"
                        "ids = (np.arange(100_000_000) % 64).astype(np.uint16)", "run(ids)")
    assert grown < 80 * 2**20, grown / 2**20  # not another 191 MB
