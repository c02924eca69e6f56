"""The planner's fix search as a notebook meets it: a fix equal to the current setting is never offered, and a
fix that cannot be planned is skipped with a note instead of crashing the plan (the PlanView shows the rest)."""
from pathlib import Path

import scellis_jupyter as sc
from scellis_jupyter.spec.edit import apply_fix

MLP = (Path(__file__).resolve().parents[2] / "benchmarks/specs/mlp.toml").read_text()


def test_after_the_batch_size_1_fix_it_is_not_offered_again():
    bs1 = sc.plan(MLP.replace("batch_size = 64", "batch_size = 1"), device="reference").peak_bytes
    memory = int(bs1 * 1.1)                  # batch 1 fits with little headroom (yellow), batch 64 does not
    p = sc.plan(MLP, device="reference", memory=memory)
    assert p.verdict == "red"
    i = next(k for k, f in enumerate(p.fixes) if f.kind == "batch_size")
    assert p.fixes[i].settings["batch_size"] == 1
    text = apply_fix(MLP, p.fixes[i])
    q = sc.plan(text, device="reference", memory=memory)
    assert q.batch_size == 1 and q.verdict == "yellow"
    assert not [f for f in q.fixes if f.kind == "batch_size" and f.settings.get("batch_size") == 1], q.fixes
    assert any("batch size 1 already" in n for n in q.notes)


def test_qlora_spec_that_does_not_fit_plans_and_notes_the_unplannable_fix():
    text = MLP.replace("clip_grad_norm = 1.0", 'clip_grad_norm = 1.0\npeft = {method = "qlora"}')
    p = sc.plan(text, device="reference", memory=60000)      # raised DTypeError at op 'add' before
    assert p.verdict == "red" and p.fixes
    assert all(f.kind != "precision" for f in p.fixes)
    assert any("mixed-f16" in n and "cannot be planned" in n for n in p.notes), p.notes
