"""`checkpointing = "activations"` set in the recipe: the same training, a lower planned peak, its cost shown.

A three-block transformer with dropout trains 4 steps with and without the setting on the reference
backend: losses and every weight and optimizer slot are bit-identical (dropout masks replayed from the
same Philox positions). The plan of the checkpointed run has a lower peak than the plain plan (built
separately), names what it recomputes and what it costs (extra compute > 0, extra kernels > 0, the peak
without it == the plain plan's peak) in its notes and options, and the loop's measured peak is that plan.
"""
from __future__ import annotations

import numpy as np

import scellis_jupyter as sc
from scellis_jupyter.run.run import Run

from fixtures import spec_text

BLOCKS = spec_text("blocks")
CK = BLOCKS.replace('determinism = "debug"', 'determinism = "debug"\ncheckpointing = "activations"')


def test_recipe_checkpointing_trains_bit_identically_and_its_plan_shows_the_trade():
    plain, ck = Run(BLOCKS, device="reference", steps=4), Run(CK, device="reference", steps=4)
    la, lb = [s.loss for s in plain], [s.loss for s in ck]
    assert la == lb
    for k, v in plain.weights().items():
        assert np.array_equal(ck.weights()[k], v), k
    for p, d in plain.optimizer_state().items():
        for slot, v in d.items():
            assert np.array_equal(ck.optimizer_state()[p][slot], v), (p, slot)
    pp, pc = plain.plan, ck.plan
    assert pc.options["checkpointing"] == "activations" and pp.options["checkpointing"] == "none"
    assert pc.peak_bytes < pp.peak_bytes and pc.breakdown["activations"] < pp.breakdown["activations"]
    cost = pc.options["recompute"]
    assert cost["peak_without"] == pp.peak_bytes
    assert cost["extra_compute"] > 0 and cost["extra_kernels"] > 0 and cost["segments"] >= 2
    assert pc.dispatches == pp.dispatches + cost["extra_kernels"]
    (note,) = pc.notes
    assert f"+{100 * cost['extra_compute']:.0f}% compute" in note and "note: activation checkpointing" in pc.table()
    assert not pp.notes and "recompute" not in pp.options
    assert ck.result()["measured_peak_bytes"] == pc.peak_bytes and plain.result()["measured_peak_bytes"] == pp.peak_bytes


def test_plan_api_and_json_carry_the_note():
    p = sc.plan(CK, device="reference")
    d = p.to_json()
    assert d["notes"] == p.notes and d["options"]["recompute"]["extra_compute"] > 0
