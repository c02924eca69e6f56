"""[model.pretrained]: weights from a .safetensors file by renamed parameter names, checked at spec time.

Checks: every loaded parameter equals the file's tensor (renamed by the rules, in order), skipped ones keep
their initializer and draw from the init stream, a Run starts from them; a spec file's relative path
starts at its folder and `package:` finds a file inside an installed package; every mistake (missing
file, missing package, a name not in the file, a shape mismatch, a bad rule, a skip matching nothing,
a file that is not safetensors, an unknown key) is a SpecError at the line:col of the key it comes from.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from safetensors.numpy import save_file

import scellis_jupyter as sc
from scellis_jupyter.rng import Generator
from scellis_jupyter.spec import Spec, SpecError
from scellis_jupyter.spec.pretrained import pretrained_overrides
from scellis_jupyter.run.run import Run
from scellis_jupyter.run.weights import init_params

R = np.random.default_rng(0)
FILE = {"encoder.0.dense.weight": R.standard_normal((16, 64)).astype(np.float32),
        "encoder.0.dense.bias": R.standard_normal(16).astype(np.float32),
        "encoder.1.dense.weight": R.standard_normal((16, 16)).astype(np.float32),
        "encoder.1.dense.bias": R.standard_normal(16).astype(np.float32),
        "pooler.weight": R.standard_normal((3, 3)).astype(np.float32)}


def _text(file: str = "w.safetensors", rename: str = r"""[['^block(\d)\.', 'encoder.\1.dense.']]""",
          skip: str = '["head.*"]', extra: str = "") -> str:
    return f"""name = "pre"
[data]
dataset = "digits"
[model]
nodes = [
  {{ name = "block0", op = "linear", out = 16 }},
  {{ op = "relu" }},
  {{ name = "block1", op = "linear", out = 16 }},
  {{ name = "head", op = "linear", out = 10 }},
]
[model.pretrained]
file = "{file}"
rename = {rename}
skip = {skip}
{extra}
[recipe]
optimizer = {{ name = "sgd", lr = 0.1 }}
batch_size = 8
determinism = "debug"
"""


@pytest.fixture()
def folder(tmp_path):
    save_file(FILE, str(tmp_path / "w.safetensors"))
    return tmp_path


def _spec(folder, text=None):
    p = folder / "spec.toml"
    p.write_text(text if text is not None else _text())
    return Spec.from_file(p)


def test_weights_load_by_renamed_name_and_skipped_ones_are_drawn(folder):
    spec = _spec(folder)
    w = init_params(spec.graph, Generator(3), overrides=pretrained_overrides(spec))
    for ours, theirs in [("block0.weight", "encoder.0.dense.weight"), ("block0.bias", "encoder.0.dense.bias"),
                         ("block1.weight", "encoder.1.dense.weight"), ("block1.bias", "encoder.1.dense.bias")]:
        assert np.array_equal(w[ours], FILE[theirs]), ours
    # the head keeps its initializer: it is what kaiming_uniform draws first from the init stream, since the
    # loaded parameters draw nothing
    g = Generator(3)
    from scellis_jupyter.catalog import make
    want = make("initializer", "kaiming_uniform")((10, 16), 16, 10, g.stream("init"), name="head.weight")
    assert np.array_equal(w["head.weight"], want)
    assert not np.any(w["head.bias"])


def test_a_run_starts_from_the_file(folder):
    run = Run(_spec(folder), device="reference", steps=1)
    w = run.weights()
    assert np.array_equal(w["block0.weight"], FILE["encoder.0.dense.weight"])
    assert np.array_equal(w["block1.bias"], FILE["encoder.1.dense.bias"])
    next(iter(run))                                       # and it trains from there
    assert not np.array_equal(run.weights()["block0.weight"], FILE["encoder.0.dense.weight"])


def test_package_resource(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "weights_pkg_for_test"
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    save_file(FILE, str(pkg / "model" / "m.safetensors"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    spec = Spec.from_text(_text("package:weights_pkg_for_test/model/m.safetensors"))
    w = init_params(spec.graph, Generator(0), overrides=pretrained_overrides(spec))
    assert np.array_equal(w["block1.weight"], FILE["encoder.1.dense.weight"])
    sys.modules.pop("weights_pkg_for_test", None)


def _error(folder, text) -> SpecError:
    with pytest.raises(SpecError) as e:
        _spec(folder, text)
    return e.value


def _line_of(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


@pytest.mark.parametrize("case,key,needle", [
    (dict(file="nope.safetensors"), "file =", "does not exist"),
    (dict(file="package:no_such_package_xyz/w.safetensors"), "file =", "no installed Python package"),
    (dict(rename="[['^block(\\d)\\.', 'encoder.\\1.dens.']]"), "rename =", "is not a tensor in w.safetensors"),
    (dict(rename="[]"), "file =", "'block0.weight' is not a tensor"),
    (dict(rename="[['^block(\\d)\\.', 'encoder.\\1.dense.'], ['encoder.0', 'encoder.1']]"), "file =",
     "has shape [16, 16], but parameter 'block0.weight' needs [16, 64]"),
    (dict(rename="[['(unclosed', 'x']]"), "rename =", "rename rule 0"),
    (dict(rename="[['only one']]"), "rename =", "must be a [pattern, replacement] pair"),
    (dict(skip='["head.*", "haed.*"]'), "skip =", "skip pattern 'haed.*' matches no parameter"),
    (dict(extra='fiel = "x"'), "fiel =", "unknown key 'fiel'"),
])
def test_mistakes_are_spec_errors_at_their_key(folder, case, key, needle):
    text = _text(**case)
    err = _error(folder, text)
    assert needle in err.diagnostic.message, err.diagnostic.message
    assert err.where.rsplit(":", 2)[-2] == str(_line_of(text, key)), (err.where, key)


def test_missing_key_hints_the_near_name_and_counts_the_rest(folder):
    err = _error(folder, _text(rename="[['^block(\\d)\\.', 'encoder.\\1.dens.']]"))
    assert "did you mean 'encoder.0.dense.weight'" in err.diagnostic.hint
    assert "3 more parameter(s)" in err.diagnostic.message


def test_a_file_that_is_not_safetensors(folder):
    (folder / "bad.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{}")
    err = _error(folder, _text("bad.safetensors"))
    assert "is not a readable .safetensors file" in err.diagnostic.message


def test_no_file_key(folder):
    text = _text().replace('file = "w.safetensors"\n', "")
    err = _error(folder, text)
    assert "needs 'file'" in err.diagnostic.message


def test_the_weights_file_is_pinned_in_the_run_record_and_verify_names_a_changed_one(folder):
    spec = _spec(folder)
    run = sc.train(spec, store=folder / "st", device="reference", steps=3, progress=False)
    (rec,) = sc.runs(folder / "st")
    pinned = rec.extra["pretrained_files"]
    assert [Path(p["path"]).name for p in pinned] == ["w.safetensors"] and len(pinned[0]["blake3"]) == 64
    assert sc.verify(run.run_id, store=folder / "st").ok
    changed = dict(FILE, **{"encoder.0.dense.bias": FILE["encoder.0.dense.bias"] + 1.0})
    save_file(changed, str(folder / "w.safetensors"))
    v = sc.verify(run.run_id, store=folder / "st")
    assert not v.ok and [c.name for c in v.differences] == ["pretrained weights"]
    assert "w.safetensors changed" in v.differences[0].detail
