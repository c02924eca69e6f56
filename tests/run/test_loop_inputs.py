"""Per-step inputs of the loop: an unchanged hyperparameter scalar (a constant lr) is not uploaded again,
and a changed one is. Checked on a step schedule (constant for 4 steps, then halved): the lr storage the
step binds holds the schedule's value after every step, and the wgpu losses follow the reference device's
(rtol 2e-4, as tests/run/test_run.py allows between the two devices)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from scellis_jupyter.run.run import Run

from fixtures import spec_text
from fixtures.devices import WG


SPEC = spec_text("digits_tiny").replace('scheduler = { name = "cosine", warmup_steps = 3 }',
                                        'scheduler = { name = "step", step_size = 4, gamma = 0.5 }')


def _lr_each_step(run, n: int) -> tuple[list, list, list]:
    seen, stored, losses = [], [], []
    for s in run:
        seen.append(s.lr)
        stored.append(float(np.asarray(run.impl.to_numpy(run._inputs["lr"])).reshape(())))
        losses.append(s.loss)
        if len(seen) == n:
            break
    return seen, stored, losses


@pytest.mark.parametrize("device", ["reference", pytest.param("wgpu", marks=pytest.mark.skipif(
    WG is None and not os.environ.get("CI"), reason="no wgpu adapter"))])
def test_the_lr_storage_holds_the_scheduled_value_across_constant_stretches_and_changes(device):
    run = Run(SPEC, device=device, steps=11)
    seen, stored, _ = _lr_each_step(run, 11)
    want = [3e-3 * 0.5 ** (i // 4) for i in range(11)]
    np.testing.assert_allclose(seen, want, rtol=1e-12)
    np.testing.assert_allclose(stored, want, rtol=1e-6)        # f32 storage of the f64 schedule value


@pytest.mark.skipif(WG is None and not os.environ.get("CI"), reason="no wgpu adapter")
def test_wgpu_losses_follow_the_reference_through_lr_changes():
    _, _, la = _lr_each_step(Run(SPEC, device=WG, steps=11), 11)
    _, _, lb = _lr_each_step(Run(SPEC, device="reference", steps=11), 11)
    np.testing.assert_allclose(la, lb, rtol=2e-4)
