"""The notebooks in notebooks/*.ipynb execute headless (nbclient, a real kernel) at small settings, and their
outputs say what the notebooks claim: plans with verdicts, run records with pins that match the store,
and `scellis verify NOTEBOOK.ipynb` that passes on the saved notebook and names an edited pin or a
changed data file (exit 1)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from fixtures.notebooks import ROOT, run_notebook

NB = ROOT / "notebooks"
RUN_MIME = "application/vnd.scellis.run+json"


def execute(path: Path, tmp: Path, steps: int, timeout: int = 600):
    """notebooks/`path` run in `tmp` at `steps` (SCELLIS_EXAMPLE_STEPS) with its store in tmp/store, saved
    as tmp/<name>; returns (the notebook, the saved file)."""
    nb = run_notebook(nbformat.read(path, as_version=4), cwd=tmp, timeout=timeout,
                      SCELLIS_EXAMPLE_STEPS=str(steps), SCELLIS_STORE=str(tmp / "store"))
    out = tmp / path.name
    nbformat.write(nb, out)
    return nb, out


def outputs(nb, i: int) -> list[dict]:
    return [o.get("data", {}) | ({"text/plain": o["text"]} if "text" in o else {}) for o in nb.cells[i].outputs]


def text(nb, i: int) -> str:
    return "\n".join(str(d.get("text/plain", "")) for d in outputs(nb, i))


def html(nb, i: int) -> str:
    return "\n".join(str(d.get("text/html", "")) for d in outputs(nb, i))


def pins(nb) -> list[dict]:
    """One pin per run (the train cell's panel and the wait cell both carry it), in order."""
    found = {}
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            d = o.get("data", {})
            if RUN_MIME in d:
                assert found.get(d[RUN_MIME]["run"], d[RUN_MIME]) == d[RUN_MIME]
                found[d[RUN_MIME]["run"]] = d[RUN_MIME]
    return list(found.values())


def store_run(tmp: Path, run_id: str):
    from scellis_jupyter.store import Store
    return Store.open(tmp / "store").get_run(run_id)


def scellis(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scellis_jupyter.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT), SCELLIS_DEVICE="reference"), timeout=600)


def test_the_notebooks_are_built_from_build_py(tmp_path):
    sys.path.insert(0, str(NB))
    try:
        import build
    finally:
        sys.path.pop(0)
    for p in build.build(tmp_path):
        assert nbformat.read(p, 4).cells == nbformat.read(NB / p.name, 4).cells, f"rebuild {p.name}: python notebooks/build.py"
    assert sorted(p.name for p in NB.glob("*.ipynb")) == sorted(f"{k}.ipynb" for k in build.NOTEBOOKS)


def test_quickstart_and_verify_notebook(tmp_path):
    nb, saved = execute(NB / "quickstart.ipynb", tmp_path, 120)
    assert 'data-verdict="' in html(nb, 3) and "2,410" not in html(nb, 3) and "hidden" in html(nb, 3)
    (pin,) = pins(nb)
    rec = store_run(tmp_path, pin["run"])
    assert rec.state == "finished" and pin["steps"] == 120 and pin["spec_hash"] == rec.spec_hash
    assert pin["data"]["memory"]["parts"]["test"]["rows"] == 197 and pin["tier"] == "debug"
    acc = float(re.search(r"test accuracy (\d\.\d+)", text(nb, 7)).group(1))
    assert acc > 0.8 and pin["metrics"]["test_accuracy"] == pytest.approx(acc, abs=1e-3)
    assert "verified" in text(nb, 8) and "bit-identical" in text(nb, 8)
    r = scellis("verify", str(saved), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verified: 1 run(s)" in r.stdout and "rerun weights" in r.stdout
    # an edited pin: exit 1, and the table names what differs
    data = json.loads(saved.read_text())
    for c in data["cells"]:
        for o in c.get("outputs", []):
            if RUN_MIME in o.get("data", {}):
                o["data"][RUN_MIME]["spec_hash"] = "0" * 64
                o["data"][RUN_MIME]["metrics"]["test_accuracy"] = 0.123
    bad = tmp_path / "edited.ipynb"
    bad.write_text(json.dumps(data))
    r = scellis("verify", str(bad), cwd=tmp_path)
    assert r.returncode == 1 and "DOES NOT VERIFY" in r.stdout
    assert re.search(r"spec\s+FAIL\s+pinned 000000000000", r.stdout) and re.search(r"pinned metrics\s+FAIL", r.stdout)


def test_a_changed_data_file_fails_verify_notebook(tmp_path):
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 3))
    rows = ["a,b,c,label"] + [f"{a:.5f},{b:.5f},{c:.5f},{int(a + b > 0)}" for a, b, c in x]
    (tmp_path / "points.csv").write_text("\n".join(rows) + "\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext scellis_jupyter"),
                nbformat.v4.new_code_cell('%%scellis pts\n[data]\ndataset = "points.csv"\ntarget = "label"\n[model]\n'
                                          'nodes = [{ op = "linear", out = 2 }]\n[recipe]\nbatch_size = 8'),
                nbformat.v4.new_code_cell("%scellis train pts --steps 10 --wait")]
    src = tmp_path / "src.ipynb"
    nbformat.write(nb, src)
    nb, saved = execute(src, tmp_path, 10)
    (pin,) = pins(nb)
    assert pin["data"]["files"] and pin["data"]["files"][0]["path"].endswith("points.csv")
    assert scellis("verify", str(saved), cwd=tmp_path).returncode == 0
    (tmp_path / "points.csv").write_text("\n".join(rows[:-1] + ["0.1,0.2,0.3,1"]) + "\n")
    r = scellis("verify", str(saved), cwd=tmp_path)
    assert r.returncode == 1 and "points.csv changed" in r.stdout and re.search(r"data files\s+FAIL", r.stdout)


def test_dataframe_notebook(tmp_path):
    nb, _ = execute(NB / "dataframe.ipynb", tmp_path, 60)
    (pin,) = pins(nb)
    assert pin["data"]["memory"]["classes"] == ["barbera", "barolo", "grignolino"]
    assert pin["data"]["memory"]["parts"]["val"]["rows"] == 38
    out = text(nb, 5)
    assert "validation:" in out and "accuracy" in out
    names = re.findall(r"'(\w+)'", out.splitlines()[-1])
    assert len(names) == 10 and set(names) <= {"barbera", "barolo", "grignolino"}


def test_memory_plans_notebook(tmp_path):
    nb, _ = execute(NB / "memory_plans.ipynb", tmp_path, 1)
    roomy, tight, small = html(nb, 4), html(nb, 5), html(nb, 6)
    # the verdict answers "does it fit": green on the CPU path too, whose device line says it is the CPU
    assert 'data-verdict="green"' in roomy and "the CPU (numpy reference path)" in roomy
    assert "little headroom" not in roomy and "warning" not in roomy
    assert 'data-verdict="yellow"' in tight and "little headroom" in tight
    assert 'data-verdict="red"' in small and "Fixes:" in small          # the PlanView's static form
    last = text(nb, 7)
    assert last.startswith("red -> ") and "red -> red" not in last and "batch size" in last


@pytest.mark.slow
def test_transformer_notebook(tmp_path):
    nb, _ = execute(NB / "transformer.ipynb", tmp_path, 20)
    (pin,) = pins(nb)
    assert pin["steps"] == 20 and store_run(tmp_path, pin["run"]).state == "finished"
    assert "attention" in text(nb, 5) and "GPU timestamps" in text(nb, 5)


@pytest.mark.slow
def test_minilm_lora_qlora_notebook(tmp_path):
    nb, _ = execute(NB / "minilm_lora.ipynb", tmp_path, 2, timeout=900)
    lora, qlora = pins(nb)
    assert lora["steps"] == qlora["steps"] == 2
    assert store_run(tmp_path, lora["run"]).state == store_run(tmp_path, qlora["run"]).state == "finished"
    assert lora["spec_hash"] != qlora["spec_hash"]
    plans = html(nb, 2)
    assert plans.count("data-verdict=") == 2


def test_user_optimizer_notebook(tmp_path):
    nb, _ = execute(NB / "user_optimizer.ipynb", tmp_path, 100)
    assert "sign_sgd" in text(nb, 2) and "&lt;cell:sign_sgd&gt;" in html(nb, 2)
    (pin,) = pins(nb)
    assert pin["steps"] == 100 and pin["metrics"]["val_accuracy"] > 0.6


@pytest.mark.slow
def test_gan_notebook(tmp_path):
    nb, _ = execute(NB / "gan.ipynb", tmp_path, 30)
    (pin,) = pins(nb)
    assert pin["steps"] == 30 and store_run(tmp_path, pin["run"]).state == "finished"
