"""Scheduler entries against torch.optim.lr_scheduler, and the rest against formulas from their papers.

torch is driven with a dummy SGD optimizer over one float64 parameter: the LR of our step t is
`optimizer.param_groups[0]["lr"]` after t calls of `scheduler.step()`. Every case runs 300 steps and must
agree within rtol 1e-12 (torch updates most LRs recursively, ours are closed forms, so they differ by
accumulated rounding only), with atol 1e-15 * base_lr for values that are 0 in exact arithmetic.
inverse_sqrt (Vaswani et al. 2017, eq. §5.3) and warmup_cosine (linear warmup + cosine to a floor, as in
GPT-3 / nanoGPT) are checked against the formulas written out below, at the same tolerance.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from scellis_jupyter import catalog
from scellis_jupyter.catalog import CatalogError
from scellis_jupyter.catalog.schedulers import Schedule

torch = pytest.importorskip("torch")
sch = torch.optim.lr_scheduler

N = 300
BASE = 0.1
RTOL, ATOL = 1e-12, 1e-15 * BASE


def torch_lrs(make, n=N, base=BASE, metrics=None):
    """LR of each of n optimizer steps under a torch scheduler (metrics: fed to step() for plateau)."""
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = make(opt)
        out = []
        for t in range(n):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            s.step(metrics[t]) if metrics is not None else s.step()
    return out


def ours(name, n=N, base=BASE, total=N, metrics=None, **hyper):
    s = Schedule(name, base, total, hyper=hyper)
    out = []
    for t in range(n):
        out.append(s.at(t))
        if metrics is not None:
            s.observe(metrics[t], t)
    assert s.values(n) == out, "lr(step) is a function of the step: asking again afterwards gives the same curve"
    return out


def close(a, b):
    np.testing.assert_allclose(np.array(a), np.array(b), rtol=RTOL, atol=ATOL)


CASES = [
    ("constant", {}, lambda o: sch.ConstantLR(o, factor=1.0, total_iters=0)),
    ("constant", {"factor": 1 / 3, "total_iters": 5}, lambda o: sch.ConstantLR(o, factor=1 / 3, total_iters=5)),
    ("constant", {"factor": 0.5, "total_iters": 120}, lambda o: sch.ConstantLR(o, factor=0.5, total_iters=120)),
    ("linear", {}, lambda o: sch.LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=N)),
    ("linear", {"start_factor": 0.25, "end_factor": 0.75, "total_steps": 77},
     lambda o: sch.LinearLR(o, start_factor=0.25, end_factor=0.75, total_iters=77)),
    ("linear", {"start_factor": 1 / 3, "end_factor": 1.0, "total_steps": 5},
     lambda o: sch.LinearLR(o, start_factor=1 / 3, end_factor=1.0, total_iters=5)),
    ("cosine", {}, lambda o: sch.CosineAnnealingLR(o, T_max=N)),
    ("cosine", {"total_steps": 100, "min_lr": 1e-3},                     # past T_max torch's cosine rises again
     lambda o: sch.CosineAnnealingLR(o, T_max=100, eta_min=1e-3)),
    ("cosine_restarts", {"T_0": 10}, lambda o: sch.CosineAnnealingWarmRestarts(o, T_0=10)),
    ("cosine_restarts", {"T_0": 7, "T_mult": 2, "eta_min": 0.01},
     lambda o: sch.CosineAnnealingWarmRestarts(o, T_0=7, T_mult=2, eta_min=0.01)),
    ("cosine_restarts", {"T_0": 3, "T_mult": 3, "eta_min": 0.0},
     lambda o: sch.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=3)),
    ("one_cycle", {"max_lr": 0.5},
     lambda o: sch.OneCycleLR(o, max_lr=0.5, total_steps=N, cycle_momentum=False)),
    ("one_cycle", {"max_lr": 0.5, "anneal": "linear", "pct_start": 0.25, "div_factor": 10.0,
                   "final_div_factor": 100.0},
     lambda o: sch.OneCycleLR(o, max_lr=0.5, total_steps=N, cycle_momentum=False, anneal_strategy="linear",
                              pct_start=0.25, div_factor=10.0, final_div_factor=100.0)),
    ("one_cycle", {"max_lr": 0.5, "three_phase": True, "pct_start": 0.4},
     lambda o: sch.OneCycleLR(o, max_lr=0.5, total_steps=N, cycle_momentum=False, three_phase=True,
                              pct_start=0.4)),
    ("one_cycle", {"three_phase": True, "anneal": "linear"},               # max_lr None: the run's base_lr
     lambda o: sch.OneCycleLR(o, max_lr=BASE, total_steps=N, cycle_momentum=False, three_phase=True,
                              anneal_strategy="linear")),
    ("cyclic", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 20},
     lambda o: sch.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=20, cycle_momentum=False)),
    ("cyclic", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 13, "step_size_down": 29, "mode": "triangular2"},
     lambda o: sch.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=13, step_size_down=29,
                            mode="triangular2", cycle_momentum=False)),
    ("cyclic", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 17, "mode": "exp_range", "gamma": 0.995},
     lambda o: sch.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=17, mode="exp_range", gamma=0.995,
                            cycle_momentum=False)),
    ("cyclic", {"step_size_up": 25},                                       # bounds derived: base_lr, 4 x base_lr
     lambda o: sch.CyclicLR(o, base_lr=BASE, max_lr=4 * BASE, step_size_up=25, cycle_momentum=False)),
    ("step", {"step_size": 30, "gamma": 0.5}, lambda o: sch.StepLR(o, step_size=30, gamma=0.5)),
    ("step", {}, lambda o: sch.StepLR(o, step_size=N // 3, gamma=0.1)),     # derived: a third of the run
    ("multistep", {"milestones": (40, 100, 100, 250), "gamma": 0.3},
     lambda o: sch.MultiStepLR(o, milestones=[40, 100, 100, 250], gamma=0.3)),
    ("multistep", {}, lambda o: sch.MultiStepLR(o, milestones=[N // 2, 3 * N // 4], gamma=0.1)),
    ("exponential", {"gamma": 0.98}, lambda o: sch.ExponentialLR(o, gamma=0.98)),
    ("exponential", {}, lambda o: sch.ExponentialLR(o, gamma=0.999)),
    ("polynomial", {"total_steps": 200, "power": 2.0}, lambda o: sch.PolynomialLR(o, total_iters=200, power=2.0)),
    ("polynomial", {"power": 0.9}, lambda o: sch.PolynomialLR(o, total_iters=N, power=0.9)),
    ("warmup", {"warmup_steps": 37},
     lambda o: sch.LambdaLR(o, lambda t: min(1.0, t / 37))),
    ("warmup", {"warmup_steps": 50, "start_factor": 0.2},
     lambda o: sch.LambdaLR(o, lambda t: 0.2 + 0.8 * t / 50 if t < 50 else 1.0)),
    ("cosine", {"warmup_steps": 30},                                       # Hugging Face's cosine-with-warmup
     lambda o: sch.LambdaLR(o, lambda t: t / 30 if t < 30 else 0.5 * (1 + math.cos(math.pi * (t - 30) / (N - 30))))),
]


@pytest.mark.parametrize("name,hyper,make", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_matches_torch(name, hyper, make):
    close(ours(name, **hyper), torch_lrs(make))


def _plateau_metrics(rng):
    """Improvements, long and short plateaus, noise inside the threshold, spikes and a late recovery."""
    segs = [np.linspace(1.0, 0.5, 40), np.full(25, 0.5), 0.5 + 1e-6 * rng.standard_normal(30),
            np.linspace(0.5, 0.3, 20), 0.3 + 0.02 * rng.random(60), np.full(15, 0.31), np.linspace(0.3, 0.1, 30),
            0.1 + 0.05 * (rng.random(80) > 0.7)]
    return [float(x) for x in np.concatenate(segs)][:N]


PLATEAU = [
    {},
    {"patience": 3, "factor": 0.5},
    {"patience": 2, "factor": 0.5, "cooldown": 4, "min_lr": 0.004},
    {"patience": 0, "factor": 0.7, "threshold": 0.01, "threshold_mode": "abs"},
    {"mode": "max", "patience": 4, "factor": 0.3, "threshold": 0.001},
    {"mode": "max", "patience": 1, "threshold_mode": "abs", "threshold": 0.0, "cooldown": 2},
    {"patience": 1, "factor": 0.1, "eps": 1e-4},                           # eps stops reductions once lr is small
]


@pytest.mark.parametrize("hyper", PLATEAU, ids=[str(i) for i in range(len(PLATEAU))])
def test_reduce_on_plateau_matches_torch(hyper):
    metrics = _plateau_metrics(np.random.default_rng(5))
    if hyper.get("mode") == "max":
        metrics = [1.0 - m for m in metrics]
    theirs = torch_lrs(lambda o: sch.ReduceLROnPlateau(o, **hyper), metrics=metrics)
    mine = ours("reduce_on_plateau", metrics=metrics, **hyper)
    assert len(set(theirs)) > 2, "the sequence must make torch reduce more than once"
    close(mine, theirs)


def test_reduce_on_plateau_resumes_exactly():
    metrics = _plateau_metrics(np.random.default_rng(6))
    a = Schedule("reduce_on_plateau", BASE, None, hyper=dict(patience=2, factor=0.5, cooldown=1))
    for t in range(150):
        a.observe(metrics[t], t)
    import json
    b = Schedule("reduce_on_plateau", BASE, None, hyper=dict(patience=2, factor=0.5, cooldown=1))
    b.load_state_dict(json.loads(json.dumps(a.state_dict(), allow_nan=False)))
    for t in range(150, N):
        a.observe(metrics[t], t)
        b.observe(metrics[t], t)
    assert a.values(N) == b.values(N)
    # the LRs of a run are those torch gives for the same metrics
    close(a.values(N), torch_lrs(lambda o: sch.ReduceLROnPlateau(o, patience=2, factor=0.5, cooldown=1),
                                 metrics=metrics))


# ---- formulas from the papers ------------------------------------------------------------------------
@pytest.mark.parametrize("warmup", [1, 4000, 50])
def test_inverse_sqrt_is_the_transformer_schedule(warmup):
    """Vaswani et al. 2017: lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup^-1.5), step_num from 1."""
    d_model = 512
    paper = [d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5) for s in range(1, N + 1)]
    base = d_model ** -0.5 * warmup ** -0.5                        # the paper's peak, reached at step_num = warmup
    close(ours("inverse_sqrt", base=base, total=None, warmup_steps=warmup), paper)


@pytest.mark.parametrize("total,warmup,ratio", [(300, 20, 0.1), (250, None, 0.0), (200, 0, 0.3), (300, None, 0.05)])
def test_warmup_cosine_formula(total, warmup, ratio):
    w = round(0.05 * total) if warmup is None else warmup
    floor = ratio * BASE

    def expected(t):
        if t < w:
            return BASE * (t + 1) / w                              # linear warmup (Goyal et al. 2017)
        if t > total:
            return floor                                           # held at the floor after the run
        return floor + 0.5 * (BASE - floor) * (1 + math.cos(math.pi * (t - w) / (total - w)))  # SGDR's cosine
    hyper = {"min_lr_ratio": ratio, **({} if warmup is None else {"warmup_steps": warmup})}
    close(ours("warmup_cosine", n=N + 50, total=total, **hyper), [expected(t) for t in range(N + 50)])


# ---- derived values and user errors --------------------------------------------------------------------
NEEDS_TOTAL = ["linear", "cosine", "one_cycle", "polynomial", "warmup_cosine", "step", "multistep"]


@pytest.mark.parametrize("name", NEEDS_TOTAL)
def test_missing_total_steps_is_a_clear_error(name):
    s = Schedule(name, BASE, None)
    with pytest.raises(CatalogError) as e:
        s.at(0)
    assert "total" in e.value.diagnostic.message and name in e.value.diagnostic.message
    assert "total_steps" in e.value.diagnostic.hint


@pytest.mark.parametrize("name", ["constant", "warmup", "cosine_restarts", "cyclic", "exponential",
                                  "inverse_sqrt", "reduce_on_plateau"])
def test_entries_that_need_no_run_length(name):
    assert all(math.isfinite(v) for v in Schedule(name, BASE, None).values(50))


def test_entry_hyperparameter_overrides_the_run_length():
    close(ours("linear", total=10, total_steps=N), torch_lrs(lambda o: sch.LinearLR(o, 1.0, 0.0, total_iters=N)))


def test_user_errors_are_catalog_errors():
    with pytest.raises(CatalogError) as e:
        catalog.make("scheduler", "cosin")
    assert "'cosine'" in e.value.diagnostic.hint
    with pytest.raises(CatalogError) as e:
        catalog.make("scheduler", "cyclic", mode="triangle")
    assert "did you mean" in e.value.diagnostic.hint
    with pytest.raises(CatalogError):
        catalog.make("scheduler", "cyclic", base_lr=0.1, max_lr=0.01)
    with pytest.raises(CatalogError):
        catalog.make("scheduler", "multistep", milestones=(10.5, 20))
    with pytest.raises(CatalogError):
        catalog.make("scheduler", "step", gamma=-1.0)
    with pytest.raises(CatalogError) as e:
        Schedule("cosine", BASE, 10, {"warmup_steps": 10}).at(0)
    assert "warmup_steps" in str(e.value)
    s = Schedule("constant", BASE, 10)
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(CatalogError):
            s.at(bad)
    for base, total in ((-0.1, 10), (float("nan"), 10), (0.1, 0), (0.1, 2.5)):
        with pytest.raises(CatalogError):
            Schedule("constant", base, total)
    with pytest.raises(CatalogError):
        Schedule(catalog.make("scheduler", "constant"), BASE, 10, {"factor": 0.5})
    with pytest.raises(CatalogError):
        Schedule("constant", BASE, 10).load_state_dict(Schedule("cosine", BASE, 10).state_dict())


def test_schedule_binding():
    s = Schedule("step", 0.2, 90)                                  # derived step_size: 30
    assert s.values(3, start=29) == [0.2, pytest.approx(0.02, rel=1e-15), pytest.approx(0.02, rel=1e-15)]
    assert s(0) == s.at(0) == 0.2 and s.state_dict()["state"] is None
    s.observe(1.0, 0)                                              # no-op for stateless entries
    t = Schedule("step", 1.0, 10)
    t.load_state_dict(s.state_dict())
    assert t.values(90) == s.values(90)
