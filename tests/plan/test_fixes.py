"""A red plan offers every fix that helps, each re-planned for real, with the spec change that makes it."""
import pytest

import scellis_jupyter as sc
from scellis_jupyter.plan.plan import _verdict
from scellis_jupyter.spec.edit import apply_changes

# a wide MLP (the 2.1-billion-parameter one of issue 11, scaled down to plan in milliseconds): weights,
# gradients and Adam state dominate, activations are tiny at batch 8
WIDE = """
name = "wide-mlp"   # comments stay when a fix is applied
[data]
dataset = "digits"
[model]
nodes = [
  { op = "linear", out = 512 }, { op = "relu" },
  { op = "linear", out = 512 }, { op = "relu" },
  { op = "linear", out = 512 }, { op = "relu" },
  { op = "linear", out = 10 },
]
[recipe]
optimizer = { name = "adam", lr = 1e-3 }
batch_size = 8
"""

# activations dominate: a transformer on long sequences
ACTS = """
name = "long-transformer"
[data]
dataset = "pydoc_topics"
seq_len = 64
[model]
nodes = [
  { op = "embedding", vocab = 96, dim = 32 },
  { op = "transformer_block", heads = 4, causal = true },
  { op = "transformer_block", heads = 4, causal = true },
  { op = "linear", out = 96 },
]
[recipe]
optimizer = { name = "adamw", lr = 1e-3 }
batch_size = 32
"""


def _replanned(text, fix, memory):
    changed = sc.Spec.from_text(apply_changes(text, fix.changes))
    return sc.plan(changed, device="reference", memory=memory, fixes=False)


def test_a_red_wide_mlp_offers_every_fix_that_helps_each_replanned_from_its_change():
    s = sc.Spec.from_text(WIDE)
    full = sc.plan(s, device="reference")
    cap = full.peak_bytes // 2
    p = sc.plan(s, device="reference", memory=cap)
    assert p.verdict == "red"
    kinds = {f.kind for f in p.fixes}
    assert {"batch_size", "optimizer", "adapters", "shard_optimizer_state", "layer_relay"} <= kinds
    assert {f.settings["optimizer"]["name"] for f in p.fixes if f.kind == "optimizer"} >= {"adafactor"}
    assert {f.settings["peft"]["method"] for f in p.fixes if f.kind == "adapters"} == {"lora", "qlora"}
    for f in p.fixes:
        if f.kind == "batch_size":
            continue
        assert f.peak_bytes < p.peak_bytes, f                       # only what helps is offered
        assert f.verdict == _verdict(f.peak_bytes, cap) or (f.verdict == "yellow" and _verdict(f.peak_bytes, cap) == "green")
        if f.requires is None:
            assert f.changes, f
            again = _replanned(WIDE, f, cap)                        # the change, applied to the text, is the fix
            assert again.peak_bytes == f.peak_bytes, (f.kind, f.changes)
        else:                                                       # a pool of devices: planned per device
            assert f.requires == "pool" and not f.changes and "pool" in f.description
    # what was tried and does not lower the peak is said, with its re-planned peak
    assert any(n.startswith("considered precision") for n in p.notes)
    assert any(n.startswith("considered checkpointing") for n in p.notes)
    assert "change: recipe.optimizer" in p.table() and "needs: a pool" in p.table()
    assert p.to_json()["fixes"][1]["changes"]


def test_when_no_single_fix_fits_a_combination_that_does_is_offered():
    s = sc.Spec.from_text(WIDE)
    p0 = sc.plan(s, device="reference")
    singles = sc.plan(s, device="reference", memory=p0.peak_bytes // 2).fixes
    best = min(f.peak_bytes for f in singles if f.requires is None and f.kind != "batch_size")
    cap = best - 1                             # below every single fix
    p = sc.plan(s, device="reference", memory=cap)
    (combo,) = [f for f in p.fixes if f.kind == "combined"]
    assert combo.verdict != "red" and len(combo.settings["kinds"]) >= 2
    assert _replanned(WIDE, combo, cap).peak_bytes == combo.peak_bytes <= cap


def test_precision_and_checkpointing_fixes_carry_their_recipe_changes_when_activations_weigh():
    s = sc.Spec.from_text(ACTS)
    full = sc.plan(s, device="reference")
    p = sc.plan(s, device="reference", memory=int(full.peak_bytes * 0.9))
    by_kind = {f.kind: f for f in p.fixes}
    assert by_kind["checkpointing"].changes == {"recipe.checkpointing": "activations"}
    assert by_kind["precision"].changes == {"recipe.precision": "mixed-f16"}
    for kind in ("checkpointing", "precision"):
        f = by_kind[kind]
        assert f.peak_bytes < full.peak_bytes
        assert _replanned(ACTS, f, p.capacity_bytes).peak_bytes == f.peak_bytes


def test_apply_changes_keeps_the_text_and_sets_key_paths():
    out = apply_changes(WIDE, {"recipe.precision": "mixed-f16", "recipe.optimizer": {"name": "adafactor", "lr": 0.001},
                               "data.placement": "stream", "recipe.batch_size": None})
    assert "# comments stay when a fix is applied" in out
    s = sc.Spec.from_text(out)
    assert s.recipe["precision"] == "mixed-f16" and s.recipe["optimizer"] == {"name": "adafactor", "lr": 0.001}
    assert s.data["placement"] == "stream" and "batch_size" not in out
    with pytest.raises(sc.SpecError):
        apply_changes(WIDE, {"name.sub": 1})


def test_the_wide_mlps_step_holds_no_weight_sized_workspace():
    """Issue 11: the workspace of a wide MLP's step was two new Adam moments per parameter held until the
    finite guard, and a transposed copy of each weight gradient. Now: parameters, every gradient, Adam's
    state, and a few batch-sized temporaries."""
    s = sc.Spec.from_text(WIDE)
    p = sc.plan(s, device="reference", evaluation=False)
    b = p.breakdown
    n = s.graph.param_count
    assert b["parameters"] == 4 * n and b["optimizer_state"] == 8 * n
    weight = 512 * 512 * 4                 # one hidden weight; before, the workspace held several of them
    assert b["workspace"] + b["activations"] < weight // 8
    prog = p.step.program
    assert not [v for v in prog.values if v.kind == "compute" and v.op == "permute" and v.nbytes >= weight]
    assert b["parameters"] * 2 + b["optimizer_state"] <= p.peak_bytes < b["parameters"] * 2 + b["optimizer_state"] + weight // 8
