"""The template mechanism of backends/wgpu/templates.py: sections, #include, #if, placeholders, errors.

Runs on small in-memory files, then checks that every shipped kernels/*.wgsl parses and that every
#include in them resolves (a kernel's own text is checked against numpy by its kernel tests).
"""
import re

import pytest

from scellis_jupyter.backends.wgpu import templates
from scellis_jupyter.backends.wgpu.kernels_path import kernel_dirs
from scellis_jupyter.backends.wgpu.templates import Templates
from scellis_jupyter.errors import KernelError

FILES = {
    "k": "// head\nconst N: u32 = {{N}}u;\n  {{BODY}}\n\n//=== a\nfn a() {}\n\n//=== b\nfn b() {\n#include lib:inner\n}\n",
    "lib": "//=== inner\n// a comment\nlet x = {{X}};\n#if BIG\nlet y = 2;\n#else\nlet y = 1;\n#endif\n"
           "//=== loop1\n#include lib:loop2\n//=== loop2\n#include lib:loop1\n",
    "flat": "a {{A}}\n#if F\n#if G\nfg\n#else\nf\n#endif\n#endif\nz\n",
}


@pytest.fixture
def t():
    return Templates(FILES.__getitem__)


def test_header_and_sections(t):
    assert t.sections("k") == ["a", "b"]
    assert t.render("k", N=3, BODY="x;") == "// head\nconst N: u32 = 3u;\n  x;\n"
    assert t.render("k", "a", N=3, BODY="") == "// head\nconst N: u32 = 3u;\n\n\nfn a() {}\n"


def test_include_takes_the_flags_and_indents(t):
    src = t.render("k", "b", flags={"BIG": True}, N=1, BODY="", X="q")
    assert src.endswith("fn b() {\n// a comment\nlet x = q;\nlet y = 2;\n}\n")
    assert "let y = 1;" in t.render("k", "b", flags={"BIG": False}, N=1, BODY="", X="q")


def test_snippet_dedents_drops_comments_and_reindents_values(t):
    assert t.snippet("lib", "inner", flags={"BIG": False}, X="1") == "let x = 1;\nlet y = 1;"
    # a placeholder alone on its line indents every line of its value
    assert t.render("k", N=0, BODY="a;\nb;").endswith("  a;\n  b;\n")


def test_nested_if(t):
    got = {(f, g): t.render("flat", flags={"F": f, "G": g}, A=7) for f in (0, 1) for g in (0, 1)}
    assert got[(0, 0)] == got[(0, 1)] == "a 7\nz\n"
    assert got[(1, 0)] == "a 7\nf\nz\n" and got[(1, 1)] == "a 7\nfg\nz\n"


def test_values_are_not_rescanned(t):
    assert "{{BODY}}" in t.render("k", N=1, BODY="{{BODY}}")


@pytest.mark.parametrize("call, match", [
    (lambda t: t.render("k", N=1), r"unfilled placeholders \['BODY'\]"),
    (lambda t: t.render("k", "zz", N=1, BODY=""), "has no section 'zz'"),
    (lambda t: t.render("flat", flags={"F": True}, A=1), "no flag 'G'"),
    (lambda t: t.snippet("lib", "loop1"), "#include cycle lib:loop1 -> lib:loop2 -> lib:loop1"),
])
def test_errors_name_the_problem(t, call, match):
    with pytest.raises(KernelError, match=match):
        call(t)


@pytest.mark.parametrize("text, match", [
    ("#if A\nx\n", "#if without #endif"),
    ("x\n#endif\n", "#endif without #if"),
    ("#if A\n#else\n#else\n#endif\n", "second #else"),
    ("#include lib\n", "names no section"),
])
def test_unbalanced_directives(text, match):
    with pytest.raises(KernelError, match=match):
        Templates({"x": text, "lib": ""}.__getitem__).render("x", flags={"A": True})


def test_duplicate_section():
    with pytest.raises(KernelError, match="section 'a' appears twice"):
        Templates({"x": "//=== a\n//=== a\n"}.__getitem__).sections("x")


def test_shipped_files_parse_and_includes_resolve():
    files = sorted({p.stem for d in kernel_dirs() for p in d.glob("*.wgsl")})
    assert {"common", "ops", "attention", "matmul"} <= set(files)
    n = 0
    for f in files:
        header, secs = templates.KERNELS.parts(f)
        for text in [header, *secs.values()]:
            for file, sec in re.findall(r"^[ \t]*#include (\w+):(\S+)", text, re.M):
                assert sec in templates.KERNELS.sections(file), f"{f}.wgsl includes missing {file}:{sec}"
                n += 1
    assert n >= 5   # attention's mask (3 kernels) and key tiles (2), the ops helpers (2)


def test_ops_table_is_the_backends_op_list():
    from scellis_jupyter.backends.wgpu.kernels import LAUNCHERS
    from scellis_jupyter.graph import opset
    ops = templates.sections("ops", "float.") + templates.sections("ops", "binary.") + templates.sections("ops", "compare.")
    assert set(ops) == set(opset.UNARY + opset.BINARY + opset.COMPARE + opset.PREDICATES)
    assert all(op in LAUNCHERS for op in ops)
