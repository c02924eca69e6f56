"""The LR range test on problems whose answer is known analytically.

A noisy quadratic f(w) = 1/2 sum_i a_i (w_i - x_i)^2 with fresh targets x ~ N(0, 0.1^2) each step: gradient
descent diverges exactly when lr > 2 / max(a) (the error contracts by |1 - lr a_i| per step), so the
finder must stop only after the LR passed 2 / max(a), must not stop when lr_max stays below it, and must
suggest an LR in (lr_min, 2 / max(a)). An engineered loss curve (a logistic in log10(lr), no smoothing)
has its steepest descent exactly at its centre, which the "steep" rule must return (rel 1e-12). The SVG is
parsed with xml.etree.
"""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from scellis_jupyter.errors import ScellisError
from scellis_jupyter.run.lr_finder import LRFinderError, LRFinderResult, lr_range_test, steepest_lr

A = np.linspace(1.0, 10.0, 8)
DIVERGE_LR = 2.0 / A.max()
SVG = "{http://www.w3.org/2000/svg}"


def quadratic_step(seed=0):
    """One SGD step on the noisy quadratic per call; weights start at 3 (the caller's reset)."""
    rng = np.random.default_rng(seed)
    w = np.full(A.shape, 3.0)

    def step(lr):
        r = w - 0.1 * rng.standard_normal(A.shape)
        loss = 0.5 * float(np.sum(A * r * r))
        w[:] = w - lr * A * r
        return loss
    return step


@pytest.mark.parametrize("seed,num", [(0, 100), (1, 150), (2, 60)])
def test_stops_after_divergence_and_suggests_below_it(seed, num):
    r = lr_range_test(quadratic_step(seed), lr_min=1e-6, lr_max=10.0, num=num)
    assert isinstance(r, LRFinderResult)
    assert r.stopped_early and r.reason == "diverged" and len(r.lrs) < num
    assert r.lrs[-1] > DIVERGE_LR                                  # it cannot blow up before 2 / a_max
    assert r.smoothed[-1] > 4.0 * min(r.smoothed)
    assert 1e-6 < r.suggestion < DIVERGE_LR
    assert r.suggestion in r.lrs and r.best_lr > r.suggestion
    assert len(r.lrs) == len(r.losses) == len(r.smoothed)
    ratios = np.array(r.lrs[1:]) / np.array(r.lrs[:-1])              # geometric grid
    np.testing.assert_allclose(ratios, (10.0 / 1e-6) ** (1 / (num - 1)), rtol=1e-12)


def test_does_not_stop_while_the_lr_stays_stable():
    r = lr_range_test(quadratic_step(3), lr_min=1e-5, lr_max=0.9 * DIVERGE_LR, num=80)
    assert not r.stopped_early and r.reason == "completed" and len(r.lrs) == 80
    assert r.lrs[0] == 1e-5 and r.lrs[-1] == 0.9 * DIVERGE_LR
    assert 1e-5 < r.suggestion < DIVERGE_LR


def test_smoothing_is_the_bias_corrected_moving_average():
    losses = [5.0, 3.0, 4.0, 1.0, 2.0]
    it = iter(losses)
    r = lr_range_test(lambda lr: next(it), lr_min=1e-3, lr_max=1e-1, num=5, smooth=0.6, diverge=100.0)
    avg, expect = 0.0, []
    for i, x in enumerate(losses):
        avg = 0.6 * avg + 0.4 * x
        expect.append(avg / (1 - 0.6 ** (i + 1)))
    np.testing.assert_allclose(r.smoothed, expect, rtol=1e-14)
    assert r.losses == losses


def test_steep_rule_finds_the_centre_of_a_logistic_drop():
    def curve(lr):
        x = math.log10(lr)
        return 1.0 + 1.0 / (1.0 + math.exp((x + 3.0) / 0.3)) + 100.0 * max(0.0, x + 1.0) ** 2
    r = lr_range_test(curve, lr_min=1e-7, lr_max=10.0, num=81, smooth=0.0)   # log10 grid step 0.1
    assert r.reason == "diverged" and r.lrs[-1] > 0.1
    assert r.suggestion == pytest.approx(1e-3, rel=1e-12)
    assert steepest_lr(r.lrs, r.smoothed) == r.suggestion
    linear = lr_range_test(curve, lr_min=1e-4, lr_max=1.0, num=201, mode="linear", smooth=0.0)
    np.testing.assert_allclose(np.diff(linear.lrs), (1.0 - 1e-4) / 200, rtol=1e-9)
    assert linear.reason == "diverged" and 1e-4 < linear.suggestion < 0.1


def test_non_finite_loss_stops_and_no_suggestion_without_a_drop():
    calls = []

    def step(lr):
        calls.append(lr)
        return 1.0 + len(calls) * 1e-3 if lr < 1e-2 else float("nan")
    r = lr_range_test(step, lr_min=1e-5, lr_max=1.0, num=50)
    assert r.reason == "non-finite loss" and r.stopped_early and math.isnan(r.losses[-1])
    assert len(calls) == len(r.lrs) < 50
    assert r.suggestion is None                                    # the loss never fell
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert d["losses"][-1] is None and d["suggestion"] is None and d["reason"] == "non-finite loss"
    ET.fromstring(r.plot())


def test_svg_and_dict(tmp_path):
    r = lr_range_test(quadratic_step(4), num=100)
    svg = r.plot()
    root = ET.fromstring(svg)
    assert root.tag == SVG + "svg"
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2 and all(len(p.get("points").split()) == len(r.lrs) for p in lines)
    xs = [float(p.split(",")[0]) for p in lines[1].get("points").split()]
    logs = np.log10(r.lrs)
    affine = xs[0] + (logs - logs[0]) * (xs[-1] - xs[0]) / (logs[-1] - logs[0])   # a log axis: x affine in log lr
    np.testing.assert_allclose(xs, affine, atol=0.011)                           # points are rounded to 0.01 px
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert f"suggested {r.suggestion:.3g}" in texts and "1e-7" in texts and "1e-1" in texts  # recorded range
    f = tmp_path / "lr.svg"
    assert r.plot(f) == svg and ET.parse(f).getroot().tag == SVG + "svg"
    assert r._repr_svg_() == svg
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert d["lrs"] == r.lrs and d["suggestion"] == r.suggestion and d["stopped_early"] is True
    assert d["settings"] == {"lr_min": 1e-7, "lr_max": 10.0, "num": 100, "mode": "exp", "smooth": 0.98,
                             "diverge": 4.0}


@pytest.mark.parametrize("kw,word", [
    ({"lr_min": 0.0}, "lr_min"), ({"lr_min": -1.0}, "lr_min"), ({"lr_max": 1e-8}, "lr_max"),
    ({"lr_max": float("inf")}, "lr_max"), ({"num": 2}, "num"), ({"num": 10.0}, "num"),
    ({"mode": "expo"}, "mode"), ({"smooth": 1.0}, "smooth"), ({"diverge": 1.0}, "diverge"),
])
def test_user_errors(kw, word):
    with pytest.raises(LRFinderError) as e:
        lr_range_test(lambda lr: 1.0, **kw)
    assert isinstance(e.value, ScellisError) and word in e.value.diagnostic.message
    assert e.value.diagnostic.hint and e.value.diagnostic.where == "lr_range_test"
    if word == "mode":
        assert "did you mean 'exp'" in e.value.diagnostic.hint


def test_bad_step_fn():
    with pytest.raises(LRFinderError):
        lr_range_test("not a function")
    with pytest.raises(LRFinderError) as e:
        lr_range_test(lambda lr: {"loss": 1.0})
    assert "step 0" in e.value.diagnostic.where
    r = lr_range_test(lambda lr: np.float32(2.0) - np.float32(lr), lr_min=1e-3, lr_max=1.0, num=5)
    assert all(isinstance(x, float) for x in r.losses)
