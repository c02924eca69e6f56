"""The plan covers the whole run: the evaluation Programs (built by program.evaluation for the run and
the plan alike), readback staging, launcher scratch; measured by the backend, by create_buffer, by a Run."""
import pytest

import scellis_jupyter as sc
from scellis_jupyter.executor import measure_step

from fixtures.devices import WG, needs_wgpu

DEVICES = ["reference", pytest.param("wgpu", marks=needs_wgpu)]

WINE = """
name = "wine-mlp"
[data]
dataset = "wine"
split = { train = 0.8, val = 0.1, test = 0.1 }
[model]
nodes = [ { op = "linear", out = 32 }, { op = "relu" }, { op = "linear", out = 3 } ]
[recipe]
optimizer = { name = "adam", lr = 1e-2 }
batch_size = 16
epochs = 2
metrics = ["accuracy"]
determinism = "debug"
"""

TINY_HEADS = """
name = "tiny-heads"
[data]
dataset = "pydoc_topics"
seq_len = 16
[model]
nodes = [
  { op = "embedding", vocab = 96, dim = 4 },
  { op = "transformer_block", heads = 4, causal = true },
  { op = "linear", out = 96 },
]
[recipe]
optimizer = { name = "adam", lr = 1e-3 }
batch_size = 4
determinism = "debug"
"""


@pytest.mark.parametrize("dev", DEVICES)
def test_a_runs_peak_with_evaluation_equals_its_predicted_peak(dev, tmp_path):
    run = sc.Run(sc.Spec.from_text(WINE), device=dev, store=tmp_path / "store")
    r = run.run_to_end()
    p = run.plan
    # wine's val and test parts (18 rows each) run a full batch of 16 and a remainder of 2
    assert p.evaluation == {"parts": [18, 18], "in_loop": True} and p.extras["evaluation_batches"] == [16, 2]
    assert r["peak_with_evaluation_bytes"] == r["measured_peak_bytes"] == r["predicted_peak_bytes"] == p.peak_bytes
    assert r["step_peak_bytes"] == r["predicted_step_peak_bytes"] < p.peak_bytes
    assert p.breakdown["evaluation"] > 0 and sum(p.breakdown.values()) == p.peak_bytes
    m = measure_step(p, dev)                  # the same plan replayed by the measurer, partial batch included
    assert m["measured_peak_bytes"] == p.peak_bytes and m.get("device_buffer_peak_bytes", p.peak_bytes) == p.peak_bytes


def test_the_run_evaluates_with_the_program_the_plan_planned():
    from scellis_jupyter.program.evaluation import build_eval_program
    run = sc.Run(sc.Spec.from_text(WINE), device="reference")
    prog, order = run._eval_program(16)
    planned = build_eval_program(run.spec, run.plan.step, 16, "reference", run.tier)
    assert prog.hash == planned.program.hash and order == planned.order


def test_the_step_alone_is_planned_when_asked():
    s = sc.Spec.from_text(WINE)
    whole, alone = sc.plan(s, device="reference"), sc.plan(s, device="reference", evaluation=False)
    assert alone.peak_bytes == whole.extras["step_peak"] < whole.peak_bytes
    assert alone.breakdown["evaluation"] == 0 and measure_step(alone)["measured_peak_bytes"] == alone.peak_bytes


@needs_wgpu
@pytest.mark.parametrize("path", ["flash", "scores"])
def test_attention_scratch_is_planned_on_wgpu(path, monkeypatch):
    """Each attention path's launcher scratch is in the plan, and the measured peak is the planned one:
    flash with head dim 1 keeps (lse, delta) apart; the score path holds the scores and their gradient."""
    monkeypatch.setenv("SCELLIS_ATTENTION_PATH", path)
    WG.impl.forget_programs()
    p = sc.plan(sc.Spec.from_text(TINY_HEADS), device=WG)
    if path == "flash":
        assert p.extras["scratch attention-stats"] == 2048   # (lse, delta) f32 pairs for 4 x 4 heads x 16 rows
    else:                                                    # 4 x 4 heads of 16 x 16 f32 scores, twice
        assert p.extras["scratch attention-scores"] == p.extras["scratch attention-dscores"] == 16384
    m = measure_step(p, WG)
    WG.impl.forget_programs()
    assert m["measured_peak_bytes"] == m["device_buffer_peak_bytes"] == p.peak_bytes, m
