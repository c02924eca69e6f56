"""benchmarks/kernels.py --quick runs end to end (small sizes, llvmpipe in CI) without touching RESULTS.md.

One timed iteration a row (after --quick's one warm-up): the rows are checked for being there, not for their
numbers, and --quick's three iterations took a sixth of the test's time."""
import os
import subprocess
import sys
from pathlib import Path

from fixtures.devices import needs_wgpu

ROOT = Path(__file__).resolve().parents[2]


@needs_wgpu
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
    attn = [l for l in r.stdout.splitlines() if l.startswith("attention")]
    assert attn and all(", score path " in l for l in attn), r.stdout   # --quick's lengths take the score path
    assert (results.read_bytes() if results.exists() else None) == before


def test_attention_rows_name_the_path_that_ran():
    """The attention path is read off the Program's recorded kernels: flash kernels, the score path's row kernels."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.kernels import attention_path
    assert attention_path({"flash_fwd", "matmul"}) == "flash"
    assert attention_path({"matmul", "attention_scores"}) == "score path"
    assert attention_path({"attention_fwd"}) == "row-wise"


def test_time_loop_spans_the_window_so_the_final_sync_is_amortized():
    """A run of 20 us with a 2 ms sync: 20 runs would read as 120 us a run; the loop must grow N until
    the runs span WINDOW_S, so the per-run figure is close to the run itself (within 50%: a loaded machine
    moves both timings by some 20%, where the unamortized sync would be 6x)."""
    import time as _time
    sys.path.insert(0, str(ROOT))
    from benchmarks import kernels as K

    def busy(s):
        t = _time.perf_counter()
        while _time.perf_counter() - t < s:
            pass
    got = K.time_loop(lambda: busy(20e-6), lambda: busy(2e-3), 20, 1, 5.0)
    t0 = _time.perf_counter()
    for _ in range(2000):
        busy(20e-6)
    run = (_time.perf_counter() - t0) / 2000          # what a run costs here, call overhead included
    assert run * 0.5 <= got < run * 1.5, (got, run)   # 20 runs and a sync would read about run + 100 us
    # a budget too small for the window stops growing N: the measurement stays short
    t0 = _time.perf_counter()
    K.time_loop(lambda: busy(1e-3), lambda: None, 2, 1, 0.02)
    assert _time.perf_counter() - t0 < 0.2
