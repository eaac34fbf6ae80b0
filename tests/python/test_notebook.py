"""examples/dp_engine.ipynb run cell by cell in a Jupyter kernel (nbclient, Debian's python3-ipykernel) of this
interpreter: it plans a torchvision model, trains a small one and shows the pages, without an error."""
import json
import os
import sys

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("torchvision")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_example_notebook_runs(tmp_path, monkeypatch):
    # a kernel of this interpreter (the first python3 on the PATH may be another, without the packages)
    spec = tmp_path / "kernels" / "dp-python"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                                                           "{connection_file}"], "display_name": "dp", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    import dp_engine  # the kernel imports the package this test would (its folder, absolute: the kernel runs elsewhere)
    monkeypatch.setenv("PYTHONPATH", os.path.dirname(os.path.dirname(os.path.abspath(dp_engine.__file__))))
    nb = nbformat.read(os.path.join(ROOT, "examples", "dp_engine.ipynb"), as_version=4)
    nbclient.NotebookClient(nb, kernel_name="dp-python", timeout=600,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs if o.output_type == "execute_result" and "text/html" in o["data"]]
    assert len(html) >= 3 and all(h.startswith("<iframe srcdoc=") or "<table" in h for h in html)
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "device 0 peaks at" in text and "the module changed: True" in text
