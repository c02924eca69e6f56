"""The scheduler conformance suite over every registered entry, user entries included.

Why one suite: built-in and user schedulers go through the same registry, so a user scheduler from a
notebook cell or a folder must pass what the built-ins pass (lr finite and >= 0 for steps 0..200 with
total_steps=100, deterministic, JSON state that resumes exactly), and a broken one is refused by
check=True with the failing check named. Numerics of the built-ins are in tests/catalog/test_schedulers_torch.py.
"""
from __future__ import annotations

import math
import textwrap

import pytest

from scellis_jupyter import catalog
from scellis_jupyter.catalog.schedulers import Schedule

SCHEDULERS = [e["name"] for e in catalog.list("scheduler")]
BUILTIN = {"constant", "linear", "warmup", "cosine", "cosine_restarts", "one_cycle", "cyclic", "step",
           "multistep", "exponential", "polynomial", "inverse_sqrt", "reduce_on_plateau", "warmup_cosine"}


def test_every_builtin_scheduler_is_there():
    assert BUILTIN <= set(SCHEDULERS)
    for e in catalog.list("scheduler"):
        assert e["summary"], f"{e['name']} has no summary"


@pytest.mark.parametrize("name", SCHEDULERS)
def test_conformance(name):
    assert catalog.check_entry(catalog.get("scheduler", name)) == []


# ---- user entries ----------------------------------------------------------------------------------------
USER_HALVING = '''
"""A user's schedule: halve the LR every `every` steps, or after `patience` bad metrics."""
from scellis_jupyter.catalog import CatalogError, Param, scheduler


@scheduler("{name}", summary="halving schedule", params={{
    "every": Param(int, None, lo=1, doc="None = a quarter of the run"),
    "patience": Param(int, 2, lo=0),
}})
class Halving:
    def __init__(self, every=None, patience=2):
        self.every, self.patience = every, patience
        self.best, self.bad, self.extra = None, 0, []

    def observe(self, value, step):
        if self.best is None or value < self.best:
            self.best, self.bad = value, 0
        else:
            self.bad += 1
        if self.bad > self.patience:
            self.extra.append(step)
            self.bad = 0

    def lr(self, step, base_lr, total_steps):
        every = self.every
        if every is None:
            if total_steps is None:
                raise CatalogError("halving needs total_steps", hint="give every=... or total_steps")
            every = max(1, total_steps // 4)
        return base_lr * 0.5 ** (step // every + sum(1 for s in self.extra if s < step))

    def state_dict(self):
        return {{"best": self.best, "bad": self.bad, "extra": list(self.extra)}}

    def load_state_dict(self, d):
        self.best, self.bad, self.extra = d["best"], d["bad"], list(d["extra"])
'''


def user_source(name):
    return textwrap.dedent(USER_HALVING.format(name=name))


def _works_like_a_builtin(name, origin):
    entry = catalog.get("scheduler", name)
    assert entry.origin == origin and catalog.check_entry(entry) == []
    listed = {e["name"]: e for e in catalog.list("scheduler")}
    assert listed[name]["params"]["patience"]["default"] == 2
    s = Schedule(name, 0.8, 40)
    assert s.values(12, start=5) == [0.8] * 5 + [0.4] * 7
    for t, m in enumerate([1.0, 1.0, 1.0, 1.0]):
        s.observe(m, t)                                            # 3 bad > patience 2: halved after step 3
    assert s.at(3) == 0.8 and s.at(4) == 0.4 and s.at(10) == 0.2


def test_user_scheduler_from_source(clean_registry):
    loaded = catalog.load_source(user_source("halving_cell"), "cell-3", check=True)
    assert [e.name for e in loaded] == ["halving_cell"]
    _works_like_a_builtin("halving_cell", "<cell:cell-3>")


def test_user_scheduler_from_a_folder(tmp_path, clean_registry):
    (tmp_path / "schedulers").mkdir()
    f = tmp_path / "schedulers" / "halving.py"
    f.write_text(user_source("halving_folder"))
    assert [e.name for e in catalog.load_folder(tmp_path, check=True)] == ["halving_folder"]
    _works_like_a_builtin("halving_folder", str(f.resolve()))
    builtin = catalog.get("scheduler", "cosine")
    assert type(catalog.get("scheduler", "halving_folder")) is type(builtin)


def test_broken_user_scheduler_from_source_is_refused(clean_registry):
    broken = user_source("halving_broken").replace("return base_lr * 0.5", "return -base_lr * 0.5")
    with pytest.raises(catalog.CatalogError) as e:
        catalog.load_source(broken, "cell-4", check=True)
    assert "finite" in str(e.value) and "halving_broken" in str(e.value)
    assert e.value.diagnostic.code == "catalog"
    assert "halving_broken" not in [x["name"] for x in catalog.list("scheduler")]


# ---- one broken entry per check ----------------------------------------------------------------------
class _Const:
    def __init__(self, value=1.0):
        self.value = value

    def lr(self, step, base_lr, total_steps):
        return base_lr * self.value


class _NoLr:
    def __init__(self, value=1.0):
        self.value = value


class _Negative(_Const):
    def lr(self, step, base_lr, total_steps):
        return base_lr * (1 - step / 50)


class _NaN(_Const):
    def lr(self, step, base_lr, total_steps):
        return math.nan if step == 150 else base_lr


class _Raises(_Const):
    def lr(self, step, base_lr, total_steps):
        return base_lr / (100 - step)


class _Impure(_Const):
    calls = 0

    def lr(self, step, base_lr, total_steps):
        type(self).calls += 1
        return base_lr / type(self).calls


class _BareNoneError(_Const):
    def lr(self, step, base_lr, total_steps):
        return base_lr * step / total_steps


class _ObserveOnly(_Const):
    def observe(self, value, step):
        pass


class _Stateful(_Const):
    def __init__(self, value=1.0):
        super().__init__(value)
        self.seen = []

    def observe(self, value, step):
        self.seen.append(step)

    def lr(self, step, base_lr, total_steps):
        return base_lr / (1 + len([s for s in self.seen if s < step]))

    def state_dict(self):
        return {"seen": list(self.seen)}

    def load_state_dict(self, d):
        self.seen = list(d["seen"])


class _ForgetfulState(_Stateful):
    def load_state_dict(self, d):
        self.seen = list(d["seen"])[:-1]


class _NotJSON(_Stateful):
    def state_dict(self):
        return {"seen": set(self.seen)}


class _ObserveCrashes(_Stateful):
    def observe(self, value, step):
        if len(self.seen) > 20:
            raise RuntimeError("boom")
        super().observe(value, step)


def test_a_good_stateful_class_passes(clean_registry):
    catalog.register("scheduler", "good_user", _Stateful, "counts observations", check=True)
    assert catalog.check_entry(catalog.get("scheduler", "good_user")) == []


@pytest.mark.parametrize("cls,check,params", [
    (_NoLr, "interface", {}),
    (_ObserveOnly, "interface", {}),
    (_Negative, "finite", {}),
    (_NaN, "finite", {}),
    (_Raises, "lr-runs", {}),
    (_Impure, "deterministic", {}),
    (_BareNoneError, "total-steps-none", {}),
    (_ForgetfulState, "state-roundtrip", {}),
    (_NotJSON, "state-json", {}),
    (_ObserveCrashes, "observe", {}),
    (_Const, "params-match-signature", {"value": catalog.Param(float, 2.0)}),
    (_Const, "param-defaults", {"value": catalog.Param(float, 1.0, lo=3.0)}),
])
def test_failing_user_entries_are_refused_with_the_check_named(cls, check, params, clean_registry):
    with pytest.raises(catalog.CatalogError) as e:
        catalog.register("scheduler", "failing_user", cls, "a broken scheduler", params, check=True)
    failed = e.value.diagnostic.details["failed"]
    assert [f.split(":")[0] for f in failed] == [check], failed          # exactly the broken check
    with pytest.raises(catalog.CatalogError):
        catalog.get("scheduler", "failing_user")
