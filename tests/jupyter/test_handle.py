"""The model handle a `%%scellis NAME` cell binds (jupyter/handle.py), used from Python cells: `.run`,
`.evaluate()` on the parts that exist, `.predict(X)` with DataFrames, and mistakes shown as the one-line
diagnostic, never a traceback, while `except DataError` still catches them."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

FRAMES = """
import pandas as pd
from sklearn.datasets import load_wine
df = load_wine(as_frame=True).frame.sample(frac=1, random_state=0)
train_df, test_df = df[:140], df[140:]
"""

WINE = """%%scellis wine
[data]
train = "train_df"
test = "test_df"
target = "target"
standardize = true
[model]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { op = "linear", out = 3 }]
[recipe]
epochs = 10
batch_size = 16
metrics = ["accuracy"]
optimizer = { name = "adam", lr = 0.01 }
"""


def _one_line(c) -> str:
    """The cell failed with the library's error, shown as its diagnostic alone: no traceback."""
    import scellis_jupyter as sc
    assert isinstance(c.error, sc.ScellisError), (c.error, c.stdout, c.stderr)
    out = c.stdout + c.stderr
    assert "Traceback" not in out and "File " not in out and "---->" not in out, out
    assert out.strip() == str(c.error).strip(), out
    return out


@pytest.fixture
def wine(ip, cell):
    assert cell(FRAMES).error is None
    assert cell(WINE).error is None
    c = cell("%scellis train wine --wait")
    assert c.error is None, c.error
    return ip.user_ns["wine"]


def test_evaluate_without_a_part_takes_the_parts_that_exist(wine, ip):
    from sklearn.metrics import accuracy_score
    assert wine.run.state == "finished"
    assert sorted(wine.run.run.split.parts) == ["test", "train"]            # no val was given
    got = wine.evaluate()
    assert set(got) == {"test_loss", "test_accuracy"}
    assert got == wine.evaluate("test")
    test_df = ip.user_ns["test_df"]
    pred = wine.predict(test_df).argmax(1)                                 # a DataFrame, its target included
    assert got["test_accuracy"] == pytest.approx(accuracy_score(test_df["target"], pred), abs=1e-12)
    assert np.array_equal(wine.predict(test_df.drop(columns=["target"])).argmax(1), pred)


def test_evaluate_names_every_part_when_val_is_there_too(ip, cell):
    assert cell(FRAMES + "val_df, test_df = df[140:160], df[160:]").error is None
    assert cell(WINE.replace('test = "test_df"', 'val = "val_df"\ntest = "test_df"')).error is None
    assert cell("%scellis train wine --wait").error is None
    got = ip.user_ns["wine"].evaluate()
    assert set(got) == {"val_loss", "val_accuracy", "test_loss", "test_accuracy"}
    assert got["val_loss"] == ip.user_ns["wine"].evaluate("val")["loss"]


def test_a_handle_mistake_is_the_one_line_diagnostic(wine, cell):
    msg = _one_line(cell("wine.evaluate('nope')"))
    assert "error[data]" in msg and "the split has no part 'nope'" in msg and "train, test" in msg
    msg = _one_line(cell("wine.predict(test_df.iloc[:, :5])"))
    assert "predict needs a batch of examples of shape [13]" in msg
    c = cell("import scellis_jupyter as sc\ntry:\n    wine.evaluate('nope')\nexcept sc.DataError as e:\n    caught = e")
    assert c.error is None                                                   # still its own class


def test_an_untrained_handle_says_so_in_one_line(ip, cell):
    assert cell(FRAMES).error is None and cell(WINE).error is None
    msg = _one_line(cell("wine.evaluate()"))
    assert "wine has not been trained" in msg and "%scellis train wine" in msg
    msg = _one_line(cell("wine.predict(test_df)"))
    assert "wine has not been trained" in msg


def test_the_readmes_notebook_handle_example_runs(ip, cell):
    """The README's notebook section: its DataFrame cells, run as written."""
    readme = (ROOT / "README.md").read_text()
    part = readme.split("<!-- readme-example: notebook-handle -->", 1)[1]
    blocks = re.findall(r"```(?:python|text)\n(.*?)```", part, re.S)[:3]
    assert blocks[1].startswith("%%scellis wine")
    for b in blocks:
        c = cell(b)
        assert c.error is None, (b, c.error)
    for shown in (".run", ".evaluate()", ".predict(test_df)"):
        assert shown in blocks[2]
    from sklearn.metrics import accuracy_score
    wine, test_df = ip.user_ns["wine"], ip.user_ns["test_df"]
    assert wine.run.state == "finished"
    got = wine.evaluate()                           # no metrics in the recipe: a classifier reports accuracy
    assert set(got) == {"test_loss", "test_accuracy"}
    assert got["test_accuracy"] == accuracy_score(test_df["target"], wine.predict(test_df).argmax(1)) > 0.8
