"""A run is in the index before its slow start-up (issue 12 item 6): `resume` and `train` reserve the run id
as soon as the checkpoint (or spec) is known, so `scellis runs` lists it while the dataset loads and the
step compiles; a start-up that fails on bad input withdraws the reservation (no run that never existed).
Checked by events (the run row exists when the dataset starts loading), not by time; the seconds are in
benchmarks/startup.py."""
import pytest

import scellis_jupyter as sc
import scellis_jupyter.run.run as run_module
from scellis_jupyter.store import Store

SPEC = """
name = "digits-startup"
[data]
dataset = "digits"
[model]
nodes = [{ op = "linear", out = 8 }, { op = "relu" }, { op = "linear", out = 10 }]
[recipe]
optimizer = { name = "adamw", lr = 3e-3 }
batch_size = 64
determinism = "debug"
"""


@pytest.mark.parametrize("how", ["train", "resume"])
def test_the_run_is_listed_before_its_dataset_loads(tmp_path, monkeypatch, how):
    st = Store.open(tmp_path / "st")
    first = sc.train(SPEC, store=st, steps=2, device="reference", progress=False)
    seen = []
    real = run_module.load_dataset

    def loading(*a, **k):
        seen.append([(r.id, r.state) for r in sc.runs(st)])
        return real(*a, **k)
    monkeypatch.setattr(run_module, "load_dataset", loading)      # the name the run loads its data through
    if how == "train":
        run = sc.train(SPEC, store=st, steps=2, device="reference", progress=False, run_id="run-startup")
    else:
        run = sc.resume(first.run_id, store=st, steps=4, progress=False, run_id="run-startup")
    assert ("run-startup", "running") in seen[0]             # listed while its dataset was still loading
    assert run.run_id == "run-startup" and st.get_run("run-startup").state == "finished"
    assert "starting" not in st.get_run("run-startup").extra


def test_a_failed_start_up_withdraws_the_reservation(tmp_path):
    st = Store.open(tmp_path / "st")
    first = sc.train(SPEC, store=st, steps=2, device="reference", progress=False)
    with pytest.raises(sc.ScellisError, match="already at step 2"):
        sc.resume(first.run_id, store=st, steps=2, progress=False, run_id="run-nothing")
    with pytest.raises(sc.ScellisError):
        sc.train(SPEC.replace('"digits"', '"no-such-dataset"'), store=st, steps=2, device="reference",
                 progress=False, run_id="run-nothing-either")
    assert [r.id for r in sc.runs(st)] == [first.run_id]
