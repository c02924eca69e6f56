"""The widgets' JavaScript: vitest unit tests (js/test/), the Python packer read by the JS decoder, and the
bundles' sizes (saved widget state repeats each widget's module per instance)."""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from scellis_jupyter.jupyter.widgets._base import STATIC
from scellis_jupyter.jupyter.widgets._series import SeriesStore

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "js"


@pytest.fixture(scope="module")
def node_modules(node):
    _, npm, env = node
    if not (JS / "node_modules" / ".bin" / "vitest").exists():
        subprocess.run([*npm, "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, capture_output=True, timeout=300,
                       env=env)
    return JS / "node_modules"


def test_vitest(node_modules, node):
    r = subprocess.run([*node[0], str(node_modules / "vitest" / "vitest.mjs"), "run", "--reporter=dot"], cwd=JS,
                       capture_output=True, text=True, timeout=300, env=node[2])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "passed" in r.stdout


def test_python_packing_reads_in_js(node_modules, node, tmp_path):
    st = SeriesStore()
    st.extend("run-1", "loss", np.arange(1, 4), np.array([2.5, np.nan, 0.125]), skipped=np.array([False, True, False]))
    st.append("run-1", "val_accuracy", 3, 0.75)
    (tmp_path / "p.bin").write_bytes(st.snapshot())
    script = (f"import {{ decode }} from {json.dumps(str(JS / 'src/lib/pack.js'))};"
              "import { readFileSync } from 'node:fs';"
              f"const b = readFileSync({json.dumps(str(tmp_path / 'p.bin'))});"
              "const s = decode(new DataView(b.buffer, b.byteOffset, b.byteLength));"
              "console.log(JSON.stringify(s.map(x => [x.run, x.name, Array.from(x.steps),"
              " Array.from(x.values, v => Number.isNaN(v) ? 'nan' : v), Array.from(x.skipped)])));")
    r = subprocess.run([*node[0], "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [["run-1", "loss", [1, 2, 3], [2.5, "nan", 0.125], [2]],
                                    ["run-1", "val_accuracy", [3], [0.75], []]]


def test_bundles_are_built_and_small():
    sizes = {p.name: p.stat().st_size for p in STATIC.glob("*.js")}
    for w in ("plan_view", "loss_curve", "run_panel", "graph_view", "catalog_browser", "lr_finder_view", "heatmap_view"):
        assert f"{w}.js" in sizes, f"{w}.js was not bundled into {STATIC}"
    # the uPlot widgets carry uPlot (~50 KB); the rest are a few KB; ELK's worker is never a widget's module
    assert sizes["loss_curve.js"] < 80_000 and sizes["lr_finder_view.js"] < 80_000
    assert max(sizes[f"{w}.js"] for w in ("plan_view", "run_panel", "catalog_browser", "heatmap_view")) < 20_000
    assert sizes["graph_view.js"] < 30_000 and sizes["elk-worker.min.js"] > 1_000_000
