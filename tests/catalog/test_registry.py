"""The catalog registry: get / list / make, did-you-mean, hyperparameter checks, duplicates, loading."""
from __future__ import annotations

import math
import sys
import textwrap
from pathlib import Path

import pytest

from scellis_jupyter import catalog
from scellis_jupyter.catalog import CatalogError, Param, StateDecl
from scellis_jupyter.errors import ScellisError

REPO = Path(__file__).resolve().parents[2]


# ---- get / list ----------------------------------------------------------------------------------------
def test_get_builtin_and_its_origin():
    e = catalog.get("optimizer", "adamw")
    assert e.kind == "optimizer" and e.name == "adamw"
    assert e.origin == str(REPO / "catalog" / "optimizers" / "adamw.py")
    assert e.obj.__module__ == "scellis_catalog.optimizers.adamw"
    assert sys.modules["scellis_catalog.optimizers.adamw"].AdamW is e.obj
    assert catalog.builtin_folder() == REPO / "catalog"


def test_misspelled_name_says_did_you_mean():
    with pytest.raises(CatalogError) as e:
        catalog.get("optimizer", "adamm")
    d = e.value.diagnostic
    assert d.code == "catalog" and isinstance(e.value, ScellisError)
    assert "'adamm'" in d.message and "did you mean" in d.hint and "'adam'" in d.hint
    with pytest.raises(CatalogError) as e:
        catalog.get("optimizer", "zzzz")
    assert "adamw" in e.value.diagnostic.hint                      # nothing close: the list of names


def test_unknown_kind():
    with pytest.raises(CatalogError) as e:
        catalog.list("optimiser")
    assert "'optimizer'" in e.value.diagnostic.hint
    with pytest.raises(CatalogError):
        catalog.get("optimisers", "adam")


def test_list():
    names = [e["name"] for e in catalog.list("optimizer")]
    assert names == sorted(names)
    assert {"adam", "adamw", "sgd", "lamb", "adafactor", "lion", "sophia", "int8adam", "prodigy"} <= set(names)
    adamw = {e["name"]: e for e in catalog.list("optimizer")}["adamw"]
    assert adamw["kind"] == "optimizer" and adamw["summary"]
    assert adamw["params"]["lr"] == {"type": "float", "default": 1e-3, "range": "[0, inf)",
                                     "doc": adamw["params"]["lr"]["doc"]}
    assert adamw["params"]["betas"]["range"] == "each in [0, 1)"
    assert adamw["params"]["amsgrad"]["range"] == ""
    everything = catalog.list()
    assert {e["kind"] for e in everything} <= set(catalog.KINDS) and len(everything) >= len(names)
    for e in everything:
        assert e["summary"], f"{e['kind']} {e['name']} has no summary"


# ---- make ----------------------------------------------------------------------------------------------
def test_make_checks_and_coerces():
    opt = catalog.make("optimizer", "adamw", lr=3e-4, betas=[0.8, 0.9], weight_decay=0)
    assert (opt.lr, opt.betas, opt.weight_decay) == (3e-4, (0.8, 0.9), 0.0)
    assert isinstance(opt.weight_decay, float)
    assert catalog.make("optimizer", "adam").lr == 1e-3                     # defaults from the class
    assert catalog.get("optimizer", "sgd").make(momentum=0.9).momentum == 0.9


def test_unknown_hyperparameter_did_you_mean():
    with pytest.raises(CatalogError) as e:
        catalog.make("optimizer", "adamw", lrr=1e-3)
    assert "'lrr'" in e.value.diagnostic.message and "'lr'" in e.value.diagnostic.hint
    with pytest.raises(CatalogError) as e:
        catalog.make("optimizer", "adamw", zzz=1)
    assert "weight_decay" in e.value.diagnostic.hint                    # nothing close: the list


@pytest.mark.parametrize("kw,needle", [
    ({"lr": -1.0}, "lr=-1.0 is out of range [0, inf)"),
    ({"lr": math.nan}, "out of range"),
    ({"betas": (0.9, 1.0)}, "betas=(0.9, 1.0) is out of range each in [0, 1)"),
    ({"betas": (0.9,)}, "needs 2 values"),
    ({"lr": "fast"}, "is not a float"),
    ({"amsgrad": 1}, "is not a bool"),
    ({"lr": True}, "is not a float"),
    ({"lr": None}, "lr=None is not allowed"),
])
def test_hyperparameter_errors_name_key_value_and_range(kw, needle):
    with pytest.raises(CatalogError) as e:
        catalog.make("optimizer", "adamw", **kw)
    assert needle in e.value.diagnostic.message
    assert e.value.diagnostic.where == "catalog optimizer 'adamw'"


def test_entry_level_refusals_become_catalog_errors():
    with pytest.raises(CatalogError) as e:
        catalog.make("optimizer", "sgd", nesterov=True)
    assert "Nesterov" in str(e.value)
    with pytest.raises(CatalogError):
        catalog.make("optimizer", "int8adam", block_size=0)
    with pytest.raises(CatalogError) as e:
        catalog.make("optimizer", "sophia", hessian_every=2.5)
    assert "is not a int" in str(e.value)


def test_param_ranges_and_choices():
    assert Param(float, 1e-3, lo=0.0, lo_open=True).range() == "(0, inf)"
    assert Param(float, 0.5, lo=0.0, hi=1.0, hi_open=True).range() == "[0, 1)"
    assert Param(float, -0.8, hi=0.0).range() == "(-inf, 0]"
    p = Param(str, "mean", choices=("mean", "sum"))
    assert p.range() == "one of 'mean', 'sum'"
    assert p.validate("reduction", "sum") == "sum"
    with pytest.raises(CatalogError) as e:
        p.validate("reduction", "summ")
    assert "'sum'" in e.value.diagnostic.hint
    assert Param(int, 3, lo=1).validate("k", 4) == 4
    assert Param(float, None).validate("lr", None) is None
    assert Param(float, 2.0, lo=1.0, inf_ok=True).validate("g", math.inf) == math.inf    # declared: "no limit"
    assert Param(float, 2.0, lo=1.0, inf_ok=True).range() == "[1, inf]"


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_an_open_range_refuses_non_finite_values(value):
    """`[0, inf)` says what it means: inf is not in it (nor -inf, nor NaN), unless the entry declares inf."""
    for p in (Param(float, 0.05, lo=0.0), Param(float, -0.8, hi=0.0), Param(tuple, None, lo=0.0, optional=True)):
        with pytest.raises(CatalogError) as e:
            p.validate("std", (value, 1.0) if p.type is tuple else value)
        assert "is out of range" in e.value.diagnostic.message and "not a finite number" in e.value.diagnostic.message
        assert p.range().removeprefix("each in ") in e.value.diagnostic.hint
    with pytest.raises(CatalogError):
        Param(float, 2.0, lo=1.0, inf_ok=True).validate("g", math.nan)                # NaN never
    if value == -math.inf:
        with pytest.raises(CatalogError):
            Param(float, 2.0, lo=1.0, inf_ok=True).validate("g", value)               # below the bound


# ---- registering / duplicates ----------------------------------------------------------------------------
class _Dummy:
    """A dummy entry."""

    def __init__(self, a=1.0):
        self.a = a


def test_register_decorator_returns_the_class(clean_registry):
    @catalog.loss("dummy_loss", params={"a": Param(float, 1.0)})
    class DummyLoss(_Dummy):
        pass
    e = catalog.get("loss", "dummy_loss")
    assert e.obj is DummyLoss and e.summary == "A dummy entry."
    assert catalog.make("loss", "dummy_loss", a=2).a == 2.0


def test_duplicate_from_another_file_is_refused(clean_registry):
    with pytest.raises(CatalogError) as e:
        catalog.register("optimizer", "adamw", _Dummy, "x", origin="/somewhere/else.py")
    assert "already registered" in e.value.diagnostic.message and "adamw.py" in e.value.diagnostic.message
    assert catalog.get("optimizer", "adamw").obj.__name__ == "AdamW"
    catalog.register("metric", "dup_metric", _Dummy, "first", origin="/a.py")
    catalog.register("metric", "dup_metric", _Dummy, "again, same file", origin="/a.py")   # idempotent
    assert catalog.get("metric", "dup_metric").summary == "again, same file"
    with pytest.raises(CatalogError):
        catalog.register("metric", "dup_metric", _Dummy, "other file", origin="/b.py")
    catalog.unregister("metric", "dup_metric")
    catalog.register("metric", "dup_metric", _Dummy, "other file", origin="/b.py")


def test_bad_names_and_params(clean_registry):
    with pytest.raises(CatalogError):
        catalog.register("optimizer", "has space", _Dummy)
    with pytest.raises(CatalogError) as e:
        catalog.register("optimizer", "dummy", _Dummy, params={"a": 1.0})
    assert "not a Param" in e.value.diagnostic.message
    with pytest.raises(CatalogError):
        catalog.register("optimiser", "dummy", _Dummy)


ENTRY = '''
from scellis_jupyter.catalog import Param, metric

@metric("{name}", summary="{summary}", params={{"k": Param(int, 1, lo=1)}})
class M:
    def __init__(self, k=1):
        self.k = k
'''


def test_reloading_a_file_is_idempotent_and_drops_removed_entries(tmp_path, clean_registry):
    f = tmp_path / "m.py"
    f.write_text(textwrap.dedent(ENTRY.format(name="file_metric", summary="v1")))
    catalog.load_file(f)
    catalog.load_file(f)
    assert catalog.get("metric", "file_metric").summary == "v1"
    f.write_text(textwrap.dedent(ENTRY.format(name="file_metric2", summary="v2")))
    catalog.load_file(f)
    assert catalog.get("metric", "file_metric2").origin == str(f.resolve())
    with pytest.raises(CatalogError):
        catalog.get("metric", "file_metric")                            # renamed in the file: gone


def test_a_failing_load_keeps_the_previous_version(clean_registry):
    catalog.load_source(textwrap.dedent(ENTRY.format(name="cell_metric", summary="good")), "c1")
    with pytest.raises(CatalogError) as e:
        catalog.load_source(textwrap.dedent(ENTRY.format(name="cell_metric", summary="new")) + "\n1/0\n", "c1")
    assert "ZeroDivisionError" in e.value.diagnostic.message and e.value.diagnostic.where.startswith("<cell:c1>:")
    assert catalog.get("metric", "cell_metric").summary == "good"
    with pytest.raises(CatalogError) as e:                              # another cell cannot take its name
        catalog.load_source(textwrap.dedent(ENTRY.format(name="cell_metric", summary="x")), "c2")
    assert "<cell:c1>" in str(e.value)


@pytest.mark.parametrize("fail, kind", [("import sys\nsys.exit(3)\n", "SystemExit"),
                                        ("raise BaseException('odd')\n", "BaseException"),
                                        ("1/0\n", "ZeroDivisionError")])
def test_any_exception_from_a_cell_is_a_diagnostic_naming_its_line(clean_registry, fail, kind):
    """sys.exit in a cell must not escape the loader (it would end a script, or leave the magic)."""
    catalog.load_source(textwrap.dedent(ENTRY.format(name="cell_metric", summary="good")), "c3")
    text = textwrap.dedent(ENTRY.format(name="cell_metric", summary="new")) + "\n" + fail
    failing = len(text.splitlines())                                   # the last line raises
    with pytest.raises(CatalogError) as e:
        catalog.load_source(text, "c3")
    d = e.value.diagnostic
    assert d.where == f"<cell:c3>:{failing}" and kind in d.message, d.format()
    assert catalog.get("metric", "cell_metric").summary == "good"       # the previous version stays


def test_a_syntax_error_in_a_cell_names_its_line(clean_registry):
    with pytest.raises(CatalogError) as e:
        catalog.load_source("x = 1\ny = (\n", "c4")
    assert e.value.diagnostic.where.startswith("<cell:c4>:2") and "SyntaxError" in e.value.diagnostic.message


def test_load_folder_layouts(tmp_path, clean_registry):
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "a.py").write_text(textwrap.dedent(ENTRY.format(name="folder_a", summary="a")))
    (tmp_path / "b.py").write_text(textwrap.dedent(ENTRY.format(name="folder_b", summary="b")))
    (tmp_path / "_private.py").write_text("raise RuntimeError('not loaded')\n")
    names = sorted(e.name for e in catalog.load_folder(tmp_path))
    assert names == ["folder_a", "folder_b"]
    assert catalog.get("metric", "folder_a").obj.__module__ == "scellis_catalog.metrics.a"
    with pytest.raises(CatalogError):
        catalog.load_folder(tmp_path / "missing")


def test_load_builtin_is_idempotent():
    before = catalog.list("optimizer")
    catalog.load_builtin()
    catalog.load_builtin(force=True)
    assert catalog.list("optimizer") == before


def test_state_decl():
    d = StateDecl("m", [3, 4], "float32")
    assert d.shape == (3, 4) and d.dtype == "f32" and d.nbytes == 48
    assert StateDecl("q", (10,), "i8").nbytes == 10
    opt = catalog.make("optimizer", "adamw")
    assert catalog.state_bytes(opt, (3, 4), "f32") == 96
    st = catalog.initial_state(catalog.make("optimizer", "prodigy", d0=1e-3), (2,), "f32")
    assert float(st["d"]) == pytest.approx(1e-3) and st["m"].shape == (2,)


def test_a_user_entry_cannot_shadow_a_builtin_not_yet_loaded(run_python):
    code = ("from scellis_jupyter import catalog\n"
            "class X:\n    pass\n"
            "try:\n    catalog.register('optimizer', 'adamw', X)\n"
            "except catalog.CatalogError as e:\n    print('refused', 'adamw.py' in str(e))\n")
    r = run_python(code, PYTHONPATH=str(REPO))
    assert r.returncode == 0, r.stderr
    assert "refused True" in r.stdout


def test_entries_pickle_by_module_name():
    import pickle
    opt = catalog.make("optimizer", "adamw", lr=0.02)
    back = pickle.loads(pickle.dumps(opt))
    assert type(back) is type(opt) and back.lr == 0.02
