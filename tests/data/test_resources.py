"""Files a spec names: relative to the spec's folder, `~` expanded, or `package:<name>/<path>`."""
from __future__ import annotations

import pytest

from scellis_jupyter.spec import SpecError
from scellis_jupyter.data.resources import resolve_resource


def test_relative_absolute_and_package(tmp_path, monkeypatch):
    (tmp_path / "a.json").write_text("{}")
    assert resolve_resource("a.json", tmp_path) == tmp_path / "a.json"
    assert resolve_resource(str(tmp_path / "a.json"), "/elsewhere") == tmp_path / "a.json"
    pkg = tmp_path / "site" / "res_pkg_for_test" / "sub"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "t.json").write_text("{}")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert resolve_resource("package:res_pkg_for_test/sub/t.json") == pkg / "t.json"


@pytest.mark.parametrize("name,needle", [
    ("package:res_nothing_here_xyz/t.json", "no installed Python package 'res_nothing_here_xyz'"),
    ("package:pytest", "must look like 'package:<package>/<path inside it>'"),
    ("missing.json", "does not exist"),
])
def test_errors(tmp_path, name, needle):
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(SpecError) as e:
        resolve_resource(name, tmp_path, where="spec.toml:3:5", what="tokenizer")
    assert needle in e.value.diagnostic.message and e.value.where == "spec.toml:3:5"
    if name == "missing.json":
        assert "other.json" in e.value.diagnostic.hint          # what the folder does hold
