"""SCELLIS_* environment settings: one table, one reader per kind, one refusal; every name the project
reads is declared, no module reads one by hand, and docs/settings.md is the table."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import scellis_jupyter as sc
from scellis_jupyter import settings
from scellis_jupyter.settings import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "scellis_jupyter"
NAME = re.compile(r"SCELLIS_[A-Z0-9_]*[A-Z0-9]")


def _refused(monkeypatch, name: str, value: str, read) -> sc.SettingError:
    monkeypatch.setenv(name, value)
    with pytest.raises(sc.SettingError) as e:
        read()
    d = e.value.diagnostic
    assert d.code == "setting" and d.where == "environment"
    assert f"{name}={value.strip()!r}" in d.message and d.hint
    assert isinstance(e.value, sc.UsageError) and isinstance(e.value, ValueError)
    return e.value


@pytest.mark.parametrize("value,want", [("1", True), ("on", True), ("TRUE", True), (" yes ", True),
                                        ("0", False), ("Off", False), ("false", False), ("no", False)])
def test_flag_spellings(monkeypatch, value, want):
    monkeypatch.setenv("SCELLIS_FUSION", value)
    assert settings.flag("SCELLIS_FUSION") is want


def test_flag_default_and_bad_value(monkeypatch):
    monkeypatch.delenv("SCELLIS_ROW_REG", raising=False)
    assert settings.flag("SCELLIS_ROW_REG") is False             # declared default off
    monkeypatch.setenv("SCELLIS_ROW_REG", "")
    assert settings.flag("SCELLIS_ROW_REG") is False             # empty: the default
    monkeypatch.delenv("SCELLIS_MATMUL_VEC4_AROWS", raising=False)
    assert settings.flag("SCELLIS_MATMUL_VEC4_AROWS", True) is True   # a reader-decided default
    assert settings.flag("SCELLIS_MATMUL_VEC4_AROWS", False) is False
    e = _refused(monkeypatch, "SCELLIS_FUSION", "Maybe", lambda: settings.flag("SCELLIS_FUSION"))   # shown as given
    assert "on or off" in str(e)


def test_number_bounds_and_kinds(monkeypatch):
    monkeypatch.setenv("SCELLIS_DEVICE_MEMORY", "8e9")
    assert settings.number("SCELLIS_DEVICE_MEMORY") == 8_000_000_000
    monkeypatch.setenv("SCELLIS_DEVICE_MEMORY", "1_000")
    assert settings.number("SCELLIS_DEVICE_MEMORY") == 1000
    monkeypatch.setenv("SCELLIS_DEVICE_MEMORY", "9007199254740993")        # 2^53 + 1: kept exact
    assert settings.number("SCELLIS_DEVICE_MEMORY") == 2 ** 53 + 1
    monkeypatch.setenv("SCELLIS_WGPU_FLUSH_US", "12")
    assert settings.number("SCELLIS_WGPU_FLUSH_US") == 12.0 and isinstance(settings.number("SCELLIS_WGPU_FLUSH_US"), float)
    monkeypatch.setenv("SCELLIS_WGPU_FLUSH_US", "12.5")
    assert settings.number("SCELLIS_WGPU_FLUSH_US") == 12.5
    monkeypatch.delenv("SCELLIS_KSPLIT_FILL", raising=False)
    assert settings.number("SCELLIS_KSPLIT_FILL", 512) == 512
    assert settings.number("SCELLIS_PEER_MAX_BYTES") == 2 << 30   # declared default
    for name, bad, says in [("SCELLIS_DEVICE_MEMORY", "lots", "whole number of bytes"),
                            ("SCELLIS_DEVICE_MEMORY", "1.5", "whole number"),
                            ("SCELLIS_DEVICE_MEMORY", "inf", "whole number"),
                            ("SCELLIS_DEVICE_MEMORY", "0", "at least 1"),
                            ("SCELLIS_MAX_BINDING_BYTES", "4095", "at least 4096"),
                            ("SCELLIS_WGPU_FLUSH_US", "nan", "number of microseconds"),
                            ("SCELLIS_WGPU_FLUSH_US", "-1", "within 0..1e+06"),
                            ("SCELLIS_WGPU_FLUSH_US", "2e6", "within 0..1e+06")]:
        e = _refused(monkeypatch, name, bad, lambda name=name: settings.number(name))
        assert says in str(e), (name, bad, str(e))


def test_choice_is_case_blind_and_suggests(monkeypatch):
    monkeypatch.setenv("SCELLIS_ATTENTION_PATH", "Flash")
    assert settings.choice("SCELLIS_ATTENTION_PATH") == "flash"
    monkeypatch.delenv("SCELLIS_ATTENTION_PATH")
    assert settings.choice("SCELLIS_ATTENTION_PATH") == "auto"
    e = _refused(monkeypatch, "SCELLIS_ATTENTION_PATH", "flsh", lambda: settings.choice("SCELLIS_ATTENTION_PATH"))
    assert "did you mean 'flash'" in e.diagnostic.hint


def test_an_undeclared_name_is_a_programming_error():
    with pytest.raises(KeyError, match="SCELLIS_NOPE is not a declared setting"):
        settings.flag("SCELLIS_NOPE")


def test_unknown_names_get_the_closest_setting():
    env = {"SCELLIS_FUSON": "1", "SCELLIS_ATENTION_PATH": "x", "SCELLIS_ZZZ": "1", "SCELLIS_FUSION": "0", "HOME": "/"}
    got = settings.unknown(env)
    assert got[0].startswith("SCELLIS_ATENTION_PATH (did you mean SCELLIS_ATTENTION_PATH")
    assert got[1] == "SCELLIS_FUSON (did you mean SCELLIS_FUSION?)"
    assert got[2] == "SCELLIS_ZZZ"                    # nothing close: no suggestion
    assert len(got) == 3
    assert settings.in_effect(env) == {"SCELLIS_FUSION": "0"}


def test_cache_dir_precedence(monkeypatch, tmp_path):
    from scellis_jupyter.backends.device import cost_cache_path
    from scellis_jupyter.backends.wgpu.kernels.matmul_tune import cache_path
    monkeypatch.delenv("SCELLIS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert settings.cache_dir() == tmp_path / "xdg" / "scellis"
    # both per-machine caches live under the one root (the matmul tuner used to ignore XDG_CACHE_HOME)
    assert Path(cost_cache_path()).parent == settings.cache_dir()
    assert cache_path("adapter").parent.parent == settings.cache_dir()
    monkeypatch.setenv("SCELLIS_CACHE_DIR", str(tmp_path / "mine"))
    assert settings.cache_dir() == tmp_path / "mine"
    assert Path(cost_cache_path()).parent == tmp_path / "mine"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("SCELLIS_CACHE_DIR")
    assert settings.cache_dir() == Path.home() / ".cache" / "scellis"


def _sources():
    files = list(PKG.rglob("*.py")) + [ROOT / "hatch_build.py", ROOT / "notebooks" / "build.py",
                                       ROOT / "tests" / "fixtures" / "lab.py", ROOT / "tests" / "run" / "test_run.py"]
    return {p: p.read_text() for p in files}


def test_every_name_the_project_reads_or_documents_is_declared():
    texts = _sources()
    texts.update({p: p.read_text() for p in (ROOT / "README.md", ROOT / "kernels" / "README.md")})
    named = {}
    for p, text in texts.items():
        for m in NAME.finditer(text):
            named.setdefault(m.group(), p.relative_to(ROOT))
    # f"SCELLIS_ATTENTION_TILE_{kind}" and the docs' "SCELLIS_ATTENTION_TILE_{FWD,DQ,DKDV}" name a family
    family = {n for n in named if n == "SCELLIS_ATTENTION_TILE"}
    assert family and all(f"SCELLIS_ATTENTION_TILE_{k}" in SETTINGS for k in ("FWD", "DQ", "DKDV"))
    missing = {n: str(p) for n, p in named.items() if n not in SETTINGS and n not in family}
    assert missing == {}, "SCELLIS_* names read or documented but not declared in settings.py"


def test_every_declared_setting_is_read_somewhere():
    text = "\n".join(t for p, t in _sources().items() if p.name != "settings.py")
    unread = [n for n in SETTINGS if n not in text and not (n.startswith("SCELLIS_ATTENTION_TILE_")
                                                           and "SCELLIS_ATTENTION_TILE_{" in text)]
    assert unread == [], "declared settings that nothing reads"


RAW = re.compile(r"""(environ(\.get)?\s*[\[(]\s*f?["']SCELLIS_|getenv\(\s*f?["']SCELLIS_)""")


def test_no_module_reads_a_setting_by_hand():
    by_hand = [str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")
               if p.name != "settings.py" and RAW.search(p.read_text())]
    assert by_hand == []


def test_docs_page_is_the_table():
    page = (ROOT / "docs" / "settings.md").read_text()
    assert page == settings.render(), "regenerate: scellis settings --markdown > docs/settings.md"
    for name in SETTINGS:
        assert f"| `{name}` |" in page


# ---- the readers that moved onto the table refuse what they used to take silently or crash on ----------
def _readers():
    from scellis_jupyter.backends.wgpu import runtime
    from scellis_jupyter.backends.wgpu.kernels import attention, elementwise, matmul, matmul_tune, reduce, softmax
    from scellis_jupyter.graph.functional import transposes_fold
    from scellis_jupyter.program import batching, epilogue, fusion
    return [("SCELLIS_FUSION", "of", fusion.enabled), ("SCELLIS_FOLD_TRANSPOSE", "nope", transposes_fold),
            ("SCELLIS_MULTI_TENSOR", "2", batching.enabled), ("SCELLIS_EPILOGUE", "offf", epilogue.enabled),
            ("SCELLIS_MATMUL_DB", "x", matmul_tune.db_enabled), ("SCELLIS_KSPLIT_FILL", "0", matmul_tune.fill_workgroups),
            ("SCELLIS_MATMUL_FOLD", "-8", lambda: matmul.fold_tiles(8)),
            ("SCELLIS_MATMUL_TUNE", "big:x", matmul_tune.tune_mode), ("SCELLIS_MATMUL_TUNE", "On", matmul_tune.tune_mode),
            ("SCELLIS_WGPU_VEC4", "of", elementwise.vec_enabled), ("SCELLIS_WGPU_ROWS", "of", elementwise.rows_enabled),
            ("SCELLIS_ROW_REG", "yes please", softmax.row_reg), ("SCELLIS_SUBROW_MAX", "1k", reduce.subrow_max),
            ("SCELLIS_ATTENTION_TILE_FWD", "8by2", lambda: attention._forced_tile("fwd")),
            ("SCELLIS_ATTENTION_TILE_DQ", "0x2", lambda: attention._forced_tile("dq")),
            ("SCELLIS_MAX_BINDING_BYTES", "big", lambda: runtime.env_binding_limit(1 << 27)),
            ("SCELLIS_WGPU_FLUSH_US", "soon", runtime.env_flush_after),
            ("SCELLIS_WGPU_SUBGROUPS", "maybe", runtime.subgroups_wanted),
            ("SCELLIS_WGPU_INT64", "64", runtime.int64_wanted),
            ("SCELLIS_WGPU_LIMITS", "browser", lambda: runtime.requested_limits({})),
            ("SCELLIS_CHECK_INDICES", "please", runtime.check_indices)]


def test_each_reader_refuses_a_bad_value(monkeypatch):
    for name, bad, read in _readers():
        _refused(monkeypatch, name, bad, read)
        monkeypatch.delenv(name)
        read()                                        # unset: the default, no error


def test_readers_take_good_values(monkeypatch):
    from scellis_jupyter.backends.wgpu import runtime
    from scellis_jupyter.backends.wgpu.kernels import attention, matmul_tune
    monkeypatch.setenv("SCELLIS_ATTENTION_TILE_FWD", "8X1")
    assert attention._forced_tile("fwd") == (8, 1)
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", "big:4")
    assert matmul_tune.tune_mode() == ("big", 4)
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", "on")
    assert matmul_tune.tune_mode() == "on"
    monkeypatch.setenv("SCELLIS_MAX_BINDING_BYTES", "1e6")
    assert runtime.env_binding_limit(1 << 27) == 1_000_000 // 256 * 256
    for v, want in (("0", False), ("off", False), ("1", True)):
        monkeypatch.setenv("SCELLIS_CHECK_INDICES", v)   # "0" used to count as set, and so as on, here
        assert runtime.check_indices() is want
    monkeypatch.delenv("SCELLIS_CHECK_INDICES")
    assert runtime.check_indices() is False


# ---- the CLI ---------------------------------------------------------------------------------------------
def test_cli_settings_lists_values_and_unknown_names(run_python):
    r = run_python(None, "settings", module="scellis_jupyter.cli", SCELLIS_FUSION="off", SCELLIS_FUSON="1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(l.split() == ["SCELLIS_FUSION", "=", "off"] for l in lines)
    assert any(l.split()[:3] == ["SCELLIS_ROW_REG", "unset", "(default"] for l in lines)
    assert "unknown: SCELLIS_FUSON (did you mean SCELLIS_FUSION?)" in lines
    assert sum(l.strip().split()[0] in SETTINGS for l in lines if l.startswith("  ")) == len(SETTINGS)
    j = run_python(None, "settings", "--json", module="scellis_jupyter.cli", SCELLIS_FUSION="off")
    got = json.loads(j.stdout)
    assert set(got["settings"]) == set(SETTINGS) and got["settings"]["SCELLIS_FUSION"]["value"] == "off"
    m = run_python(None, "settings", "--markdown", module="scellis_jupyter.cli")
    assert m.stdout == settings.render()


def test_a_misspelled_setting_is_noted_when_a_device_is_chosen(run_python):
    r = run_python("import scellis_jupyter as sc; sc.device()", SCELLIS_DEVICE="reference", SCELLIS_EPILOUGE="off")
    assert r.returncode == 0, r.stderr
    assert "SCELLIS_EPILOUGE (did you mean SCELLIS_EPILOGUE?): not a setting scellis reads" in r.stderr


def test_a_bad_value_stops_a_run_with_the_diagnostic(run_python):
    code = ("import numpy as np, scellis_jupyter as sc\n"
            "x = sc.tensor(np.ones((4, 4), np.float32))\n"
            "print(((x + 1) * 2).numpy().sum())\n")
    ok = run_python(code, SCELLIS_DEVICE="reference")
    assert ok.returncode == 0 and ok.stdout.strip() == "64.0", ok.stderr
    r = run_python(code, SCELLIS_DEVICE="reference", SCELLIS_FUSION="maybe")
    assert r.returncode != 0
    assert "error[setting] at environment: SCELLIS_FUSION='maybe' is not on or off" in r.stderr
