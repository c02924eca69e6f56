"""A script, the CLI and the detached child import the package without the notebook stack or Dask: IPython is
needed only inside a kernel (`%load_ext`), Dask only when a Pool starts."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("IPython", "ipykernel", "ipywidgets", "anywidget", "dask", "distributed", "pandas", "torch")

CODE = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {BLOCKED!r}:
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
import scellis_jupyter as sc, scellis_jupyter.cli, scellis_jupyter.run.child
print(sc.plan('{ROOT / "benchmarks/specs/mlp.toml"}', device='reference').verdict)
"""


def test_import_and_plan_without_ipython_or_dask():
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "SCELLIS_DEVICE_PROBE": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() in ("green", "yellow"), r.stdout
