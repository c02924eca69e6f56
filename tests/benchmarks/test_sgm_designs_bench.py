"""benchmarks/sgm_designs.py: every bare design is a whole tiling of the benchmark's sizes, the engine's sources it
times render for both C types, and on an adapter without subgroup matrices (CI's) it says so and exits 0."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import sgm_designs  # noqa: E402
from scellis_jupyter.backends.wgpu.kernels import matmul, matmul_sgm  # noqa: E402


@pytest.mark.parametrize("name", list(sgm_designs.DESIGNS))
def test_each_design_tiles_the_sizes_it_runs(name):
    kind, v = sgm_designs.DESIGNS[name]
    src, bm, bn = (sgm_designs.direct if kind == "direct" else sgm_designs.staged)(*v)
    assert 4096 % bm == 0 and 4096 % bn == 0 and 2048 % bm == 0
    assert "subgroupMatrixMultiplyAccumulate" in src and "enable chromium_experimental_subgroup_matrix;" in src
    if kind == "staged":
        fm, fn, wm, wn, bk = v[:5]
        threads = 32 * wm * wn
        assert (bm * bk) % (4 * threads) == 0 and (bk * bn) % (4 * threads) == 0


@pytest.mark.parametrize("c_dtype", ["f16", "f32"])
def test_the_engine_sources_it_times_render(c_dtype):
    cfg = matmul_sgm.Config("f16", 16, 16, 16, 32)
    for tile in ("sgm_w_big", "sgm_w_wide", "sgm_big"):
        csf = matmul_sgm.cs_frags(cfg, tile, 49152)
        src = matmul_sgm.source(cfg, tile, "f16", matmul._epi_parts(None, "f16"), "", False, False, True, True,
                                (True, True), None if c_dtype == "f16" else "f32", csf)
        assert f"var<storage, read_write> C: array<{c_dtype}>" in src


def test_without_the_feature_it_times_nothing():
    env = dict(os.environ, VK_ICD_FILENAMES="/usr/lib/chromium/vk_swiftshader_icd.json")
    if not Path(env["VK_ICD_FILENAMES"]).exists():
        pytest.skip("no SwiftShader ICD (Debian's chromium) on this machine")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sgm_designs.py"), "--n", "256"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "nothing to time" in out.stdout
