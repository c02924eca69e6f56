"""benchmarks/kernels.py --quick runs end to end (small sizes, llvmpipe in CI) without touching RESULTS.md.

One timed iteration a row (after --quick's one warm-up): the rows are checked for being there, not for their
numbers, and --quick's three iterations took a sixth of the test's time."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _has_wgpu() -> bool:
    import scellis_jupyter as sc
    try:
        return sc.device("wgpu").backend == "wgpu"
    except sc.ScellisError:
        return False


@pytest.mark.skipif(not _has_wgpu() and not os.environ.get("CI"), reason="no wgpu adapter")
def test_quick_benchmark_runs(tmp_path):
    results = ROOT / "benchmarks" / "RESULTS.md"
    before = results.read_bytes() if results.exists() else None
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SCELLIS_DEVICE", None)
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernels.py"), "--quick", "--no-write",
                        "--sizes", "64,128", "--iters", "1"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [l for l in r.stdout.splitlines() if l.startswith("matmul")]
    assert any(" f32 " in l for l in lines), r.stdout
    assert all("TFLOP/s" in l for l in lines)
    assert (results.read_bytes() if results.exists() else None) == before
