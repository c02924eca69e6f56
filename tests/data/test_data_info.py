"""`dataset_info`: what the plan reads of a data file before any data is loaded.

The plan must refuse what `train` refuses about a CSV's shape: an empty file, a header without rows, a row
whose field count differs from the header's, a target column the header does not name. Each refusal is a spec diagnostic at the spec's `dataset` line naming the file (and
its line), and `scellis plan` exits 2 with it, as `scellis train` does with the loader's words.
"""
from __future__ import annotations

import contextlib
import io

import pytest

from scellis_jupyter import cli
from scellis_jupyter.data import DataError, load_dataset

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
    rc, text = plan(tmp_path, "d.csv", 'target = "y"')                           # the plan says the same, before any data
    assert rc == 2 and text.startswith(f"error[spec] at {tmp_path / 'spec.toml'}:3:11:"), text
    assert words in text and (f"{csv}:{line}" if line else str(csv)) in text, text
