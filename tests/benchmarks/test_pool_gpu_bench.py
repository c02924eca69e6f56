"""benchmarks/pool_gpu.py (issue 17's script, run on a two-GPU machine) on this machine's adapter: its specs
parse, and a short run of every part (single device, 2 pooled workers, the sharded-state demo) ends with the
pooled losses equal to the single device's and the demo red on one device, green over two. A broken script
would waste the device time it is written for."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scellis_jupyter.spec import Spec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks import pool_gpu  # noqa: E402


@pytest.mark.parametrize("small", [False, True], ids=["gpt-bench", "small"])
def test_the_gpt_spec_parses_at_tier_prod_with_seed_0(small):
    spec = Spec.from_text(pool_gpu.gpt_spec(small))
    assert spec.recipe["determinism"] == "prod" and spec.recipe["seed"] == 0
    blocks = [n for n in spec.model.nodes if n.op == "transformer_block"]
    assert len(blocks) == (2 if small else 6) and spec.model.nodes[0].attrs["dim"] == (64 if small else 384)


def test_task_seconds_splits_the_stream_by_part_of_the_step():
    def rec(key, comp, moved=0.0):
        spans = [{"action": "compute", "start": 10.0, "stop": 10.0 + comp}]
        if moved:
            spans.append({"action": "transfer", "start": 5.0, "stop": 5.0 + moved})
        return {"key": key, "startstops": spans}
    stream = [rec("dev_slice_gradient-1f2e-aa", 0.5, 0.25), rec("slice_gradient-77", 0.25),
              rec("_reduce_step-3c-9", 0.125, 0.5), rec("('_reduce_step-4d', 0)", 0.125),
              rec("dev_apply_update-5e", 0.75), rec("apply_update-6f", 0.25, 0.125), rec("_loss_of-8", 1.0, 1.0)]
    got = pool_gpu.task_seconds(stream)
    assert got == {"grad": 0.75, "update": 1.0, "reduce": 0.75, "transfer": 0.25 + 0.5 + 0.125 + 1.0}


@pytest.mark.slow
def test_the_script_runs_end_to_end_small():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pool_gpu.py"), "--small", "--steps", "1",
                        "--warmup", "1", "--workers", "2", "--threads"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "2 workers" in out and "(ok)" in out, out
    head = next(l for l in out.splitlines() if l.startswith("run "))
    assert all(c in head for c in ("slice grads s/step", "reduce s/step", "updates s/step", "transfers s/step"))
    row = next(l for l in out.splitlines() if l.startswith("2 workers"))
    at = head.index("slice grads s/step")                 # the table's columns are padded to its header
    assert float(row[at:].split()[0]) > 0, out
    assert "one device at that memory: refused" in out and "sharded over 2: green" in out, out
