"""All shader text lives in kernels/*.wgsl: no string literal in the package's Python holds WGSL.

Scans every string constant (f-string pieces included; docstrings, which only document, are left out)
of every module under scellis_jupyter/ with `ast`, for tokens that only WGSL code has. Launchers may name templates,
sections and placeholders, and pass identifiers or numbers as placeholder values; anything more
belongs in a .wgsl file (kernels/README.md says how to add a section or an include).
"""
import ast
import re
from pathlib import Path

import scellis_jupyter

PKG = Path(scellis_jupyter.__file__).resolve().parent

WGSL = re.compile("|".join([
    r"@(compute|group|binding|builtin|workgroup_size|vertex|fragment)\b", r"\bworkgroup_size\s*\(",
    r"\bvar\s*<", r"\b(array|vec[234]|mat\dx\d|ptr|atomic|bitcast|texture_\w+)\s*<",
    r"\bfn\s+\w+\s*\(", r"\blet\s+\w+\s*(:\s*\w+\s*)?=", r"\bvar\s+\w+\s*(:\s*\w+\s*)?=",
    r"\b(workgroupBarrier|storageBarrier|textureStore|textureLoad|arrayLength)\s*\(",
    r"\benable\s+f16\s*;", r"\bselect\s*\(", r"\breturn\s+[^;\n]*;\s*\}", r"\bstruct\s+\w+\s*\{",
    r"\b\d+u\b", r"\b(f32|f16|i32|u32)\(", r"\w\[o\[",
]))


def wgsl_literals(source: str, name: str) -> list[str]:
    """'name:line: match in text' for each string constant of `source` that looks like WGSL, by line."""
    tree = ast.parse(source, filename=name)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            m = WGSL.search(node.value)
            if m:
                hits.append((node.lineno, f"{name}:{node.lineno}: {m.group(0)!r} in {node.value[:60]!r}"))
    return [h for _, h in sorted(hits)]


def test_the_scan_sees_wgsl():
    import textwrap
    src = textwrap.dedent('''
        """A docstring may say @binding(1) or `enable f16;`."""
        A = "@compute @workgroup_size(64)"
        B = f"let x{k} = f32(y);"
        C = "fn comb(a: f32) -> f32 { return a + b; }"
        D = "out[o[0]] = x0[o[1]];"
        OK = f"matmul:{variant}:{dtype}"
        E = "the f32 dtype (i.e. float), cast to i32 first; select a device; return Nodes;"
        def f():
            "a docstring"
            return "var<workgroup> s: array<f32, 64>;"
    ''')
    hits = wgsl_literals(src, "probe.py")
    assert [h.split(":")[1] for h in hits] == ["3", "4", "5", "6", "11"], hits


def test_no_wgsl_in_package_python():
    files = sorted(PKG.rglob("*.py"))
    assert len(files) > 50
    hits = [h for f in files for h in wgsl_literals(f.read_text(encoding="utf-8"), str(f.relative_to(PKG.parent)))]
    assert not hits, "WGSL text inside Python strings (move it into kernels/*.wgsl):\n" + "\n".join(hits)
