"""dp_engine.train equal to dp train: the same weights byte for byte and the same metrics for a built-in
model, a model file, an image folder and token data; arrays handed over in memory equal to the same
samples in tensor files; a torch module trained in place (every parameter and buffer dp keeps, tied
parameters still tied)."""
import json
import os

import numpy as np
import pytest

import dp_engine as dp
from dp_engine import safetensors

torch = pytest.importorskip("torch")


def cli_run(cli, folder, *args):
    """dp train with ARGS: (weights by name, step rows, evaluation rows)."""
    metrics, save = os.path.join(folder, "cli.jsonl"), os.path.join(folder, "cli.safetensors")
    cli("train", *args, "--metrics", metrics, "--save", save)
    rows = [json.loads(line) for line in open(metrics)]
    return (safetensors.read(save)[0], [r for r in rows if "after_step" not in r], [r for r in rows if "after_step" in r])


def same_run(run, expected):
    weights, steps, evaluations = expected
    assert sorted(run.weights) == sorted(weights)
    for name, array in weights.items():
        assert run.weights[name].dtype == array.dtype and run.weights[name].tobytes() == array.tobytes(), name
    assert [r["loss"] for r in run.history] == [r["loss"] for r in steps]
    assert [(r["test_loss"], r.get("test_accuracy")) for r in run.evaluations] == \
        [(r["test_loss"], r.get("test_accuracy")) for r in evaluations]


def test_a_built_in_model_trains_as_on_the_command_line(cli, tmp_path):
    flags = dict(devices="host:2", batch=32, steps=4, generated_size=256, eval=True, optimizer="adamw", lr=0.002)
    run = dp.train("mlp", **flags)
    same_run(run, cli_run(cli, tmp_path, "--model", "mlp", "--devices", "host:2", "--batch", "32", "--steps", "4",
                          "--generated-size", "256", "--eval", "--optimizer", "adamw", "--lr", "0.002"))
    assert len(run.history) == 4 and run.evaluations and run.losses == [r["loss"] for r in run.history]


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.bn(self.conv(x))), 1))


def samples(n, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 3, 8, 8), dtype=np.uint8), rng.integers(0, 5, n).astype(np.int64)


def test_a_module_with_arrays_is_the_model_file_with_tensor_files(cli, tmp_path):
    torch.manual_seed(0)
    net = SmallNet()
    (x, y), (tx, ty) = samples(64, 1), samples(16, 2)
    # the command line's run: the module as a model file with its weights, the arrays as tensor files
    from dp_engine.models import export_module
    model, weights, names = export_module(net, None, str(tmp_path), (3, 8, 8))
    data = tmp_path / "data"
    data.mkdir()
    for name, array in (("train_images", x), ("train_labels", y), ("val_images", tx), ("val_labels", ty)):
        np.save(data / f"{name}.npy", array)
    expected = cli_run(cli, tmp_path, "--model", model, "--init", weights, "--data", data, "--devices", "host:2",
                       "--batch", "16", "--epochs", "2", "--eval", "--seed", "7")
    before = {k: v.clone() for k, v in net.state_dict().items()}
    run = dp.train(net, data=(torch.from_numpy(x), torch.from_numpy(y)), test_data=(tx, ty), devices="host:2", batch=16,
                   epochs=2, eval=True, seed=7)
    same_run(run, expected)
    # the module holds the trained values, parameters and buffers (batch norm's running statistics)
    state = net.state_dict()
    assert set(names) <= set(state)
    for name in names:
        assert state[name].numpy().tobytes() == expected[0][name].tobytes(), name
    assert not torch.equal(state["bn.running_mean"], before["bn.running_mean"])
    net.load_state_dict(state, strict=True)


def test_an_image_folder_trains_as_on_the_command_line(cli, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(3)
    folder = tmp_path / "folder"
    for c in ("a", "b"):
        (folder / c).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(rng.integers(0, 256, (30, 34, 3), dtype=np.uint8)).save(folder / c / f"{i}.png")
    args = dict(devices="host:2", batch=4, steps=3)
    run = dp.train("convnet", data=str(folder), **args)
    same_run(run, cli_run(cli, tmp_path, "--model", "convnet", "--data", folder, "--devices", "host:2", "--batch", "4",
                          "--steps", "3"))


def test_token_arrays_and_a_tied_gpt_trained_in_place(cli, tmp_path):
    from nanogpt_model import make
    torch.manual_seed(0)
    gpt = make(block_size=16, vocab_size=64, n_layer=1, n_head=2, n_embd=16, dropout=0.0)
    assert gpt.transformer.wte.weight is gpt.lm_head.weight
    rng = np.random.default_rng(5)
    train, val = rng.integers(0, 64, 2000).astype(np.uint16), rng.integers(0, 64, 300).astype(np.uint16)
    from dp_engine.models import export_module
    model, weights, names = export_module(gpt, "tokens:16", str(tmp_path))
    data = tmp_path / "tokens"
    data.mkdir()
    train.tofile(data / "train.bin")
    val.tofile(data / "val.bin")
    expected = cli_run(cli, tmp_path, "--model", model, "--init", weights, "--data", data, "--devices", "host:2",
                       "--batch", "8", "--steps", "3", "--eval")
    run = dp.train(gpt, data=train, test_data=val, input="tokens:16", devices="host:2", batch=8, steps=3, eval=True)
    same_run(run, expected)
    assert gpt.transformer.wte.weight is gpt.lm_head.weight  # still tied
    state = gpt.state_dict()
    for name in names:
        assert state[name].numpy().tobytes() == expected[0][name].tobytes(), name
    gpt.load_state_dict(state, strict=True)  # the causal mask dp does not keep is the module's own
    # the train.bin path names its folder, as nanoGPT's layout has it
    again = dp.train(model, data=str(data / "train.bin"), init=weights, devices="host:2", batch=8, steps=3, eval=True)
    same_run(again, expected)


def test_array_data_is_checked_as_tensor_files_are():
    x, y = samples(8, 1)
    with pytest.raises(dp.DpError, match="label -1 of sample 0 is not a class index"):
        dp.train("mlp", data=(x[:, :1, :, :].repeat(1, 1), np.full(8, -1)), devices="host:1", steps=1, batch=4)
    with pytest.raises(dp.DpError, match=r"takes \[1, 28, 28\] samples"):
        dp.train("mlp", data=(x, y), devices="host:1", steps=1, batch=4)
    with pytest.raises(dp.DpError, match="dtype"):
        dp.train("mlp", data=(x.astype(np.complex64), y), devices="host:1", steps=1, batch=4)
