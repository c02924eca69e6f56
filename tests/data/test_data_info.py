"""`dataset_info`: what the plan reads of a data file before any data is loaded.

The plan must refuse what `train` refuses about a file: a path that is not a regular file (a FIFO would
block `scellis plan` on open), and about a CSV's shape: an empty file, a header without rows, a row whose
field count differs from the header's, a target column the header does not name. Each refusal is a spec
diagnostic at the spec's `dataset` line naming the file (and its line), and `scellis plan` exits 2 with
it, as `scellis train` does with the loader's words.
"""
from __future__ import annotations

import contextlib
import io

import pytest

from scellis_jupyter import cli
from scellis_jupyter.data import DataError, load_dataset
from scellis_jupyter.data.info import dataset_info
from scellis_jupyter.spec import SpecError

from fixtures.fifo import call_beside_fifo, make_fifo

SPEC = """name = "t"
[data]
dataset = "DATA"
[model]
nodes = [{ op = "linear", out = 3 }]
[recipe]
optimizer = { name = "sgd", lr = 0.1 }
batch_size = 4
determinism = "debug"
"""


def plan(tmp_path, dataset: str, extra: str = "") -> tuple[int, str]:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.replace("DATA", dataset).replace("[model]", f"{extra}\n[model]"))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["plan", str(spec), "--device", "reference"])
    return rc, err.getvalue()


def test_a_fifo_is_refused_by_the_plan_not_opened(tmp_path):
    fifo = make_fifo(tmp_path / "d.csv")
    err = call_beside_fifo(lambda: dataset_info(str(fifo), where="spec.toml:3:11"), fifo)
    assert isinstance(err, SpecError), err
    d = err.diagnostic
    assert d.where == "spec.toml:3:11" and "not a regular file" in d.message and "FIFO" in d.message, d.format()
    out: dict = {}
    assert call_beside_fifo(lambda: out.setdefault("plan", plan(tmp_path, "d.csv")), fifo) is None
    rc, text = out["plan"]
    assert rc == 2 and text.startswith(f"error[spec] at {tmp_path / 'spec.toml'}:3:11:"), text
    assert str(fifo) in text and "FIFO" in text


@pytest.mark.parametrize("body, words, line", [
    ("", "the file is empty (no header row)", None),
    ("a,b,y\n", "the file has a header but no data rows", None),
    ("a,b,y\n1,2,0\n\n3,4\n", "row has 2 fields, the header has 3", 4),
    ("a,b,y\n1,2,0\n3,4,1,9\n", "row has 4 fields, the header has 3", 3),
    ("a,b,z\n1,2,0\n", "no column named 'y'", 1),
])
def test_the_plan_reads_the_csv_checks_train_makes(tmp_path, body, words, line):
    csv = tmp_path / "d.csv"
    csv.write_text(body)
    with pytest.raises(DataError) as e:                          # what train's loader says
        load_dataset(str(csv), {"target": "y"})
    assert words in e.value.diagnostic.message
    rc, text = plan(tmp_path, "d.csv", 'target = "y"')          # the plan says the same, before any data
    assert rc == 2 and text.startswith(f"error[spec] at {tmp_path / 'spec.toml'}:3:11:"), text
    assert words in text and (f"{csv}:{line}" if line else str(csv)) in text, text
