"""Property: whatever bytes a spec file holds, `scellis plan` answers with a plan or a diagnostic, never a
traceback (issue 12). Mutants of every spec under benchmarks/specs/, drawn by hypothesis (derandomized,
bounded examples, so CI time stays around half a minute); `benchmarks/fuzz_specs.py` runs 1,040 of them."""
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.fuzz_specs import MUTATORS, mutate, plan_outcome, specs

SPECS = {p.name: p.read_bytes() for p in specs()}


def bounded(n: int) -> settings:
    return settings(max_examples=n, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _check(data: bytes, folder: Path) -> None:
    outcome, detail = plan_outcome(data, folder)
    assert outcome in ("plan", "diagnostic"), detail


def test_every_spec_plans_unchanged(tmp_path):
    for name, data in SPECS.items():
        assert plan_outcome(data, tmp_path)[0] == "plan", name


@bounded(500)
@given(name=st.sampled_from(sorted(SPECS)), kind=st.sampled_from(sorted(MUTATORS)),
       seed=st.integers(0, 2 ** 32 - 1))
def test_mutated_specs_give_a_plan_or_a_diagnostic(tmp_path, name, kind, seed):
    _check(mutate(SPECS[name], kind, seed), tmp_path)


@bounded(250)
@given(name=st.sampled_from(sorted(SPECS)), at=st.floats(0, 1), junk=st.binary(min_size=1, max_size=12),
       cut=st.booleans())
def test_hypothesis_chosen_bytes_and_cuts(tmp_path, name, at, junk, cut):
    data = SPECS[name]
    i = int(at * len(data))
    _check(data[:i] if cut else data[:i] + junk + data[i:], tmp_path)
