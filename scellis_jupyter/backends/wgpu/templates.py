"""WGSL templates from kernels/*.wgsl: named sections, includes, `#if` blocks and `{{NAME}}` placeholders.

Why: every line of shader text lives in kernels/, where it can be read as WGSL; a launcher only picks
a file (and a section of it), switches `#if` blocks, fills placeholders, binds and dispatches. Where a
launcher generates code (a fused group's instruction list, the unrolled matmul tile), it assembles
named snippets of a .wgsl file, never text of its own. The grammar (kernels/README.md says more):

    //=== name            starts section `name` (up to the next marker); the text above the first
                          marker is the file's header
    #include file:name    (alone on a line) section `name` of kernels/file.wgsl, expanded in place
    #if FLAG / #else / #endif    kept or dropped by the `flags` given (nestable)
    {{NAME}}              the value given for NAME; alone on a line, every line of the value is
                          indented like the placeholder. A placeholder left unfilled is an error.
"""
from __future__ import annotations

import functools
import re
import textwrap
from collections.abc import Mapping

from ...errors import KernelError

WGSL_TYPE = {"f32": "f32", "f16": "f16", "i32": "i32", "u32": "u32", "bool": "u32"}

_MARK = re.compile(r"^//=== *(\S+) *$")
_DIRECTIVE = re.compile(r"^([ \t]*)#(include|if|else|endif)\b *(\S*) *$")
_ALONE = re.compile(r"^([ \t]*)\{\{(\w+)\}\}[ \t]*$")
_PLACE = re.compile(r"\{\{(\w+)\}\}")


@functools.cache
def _parts(name: str) -> tuple[str, dict]:
    """(header, {section: text}) of kernels/<name>.wgsl."""
    from .kernels_path import kernel_source
    header, sections, cur, buf = "", {}, None, []
    for line in kernel_source(name).splitlines(keepends=True):
        m = _MARK.match(line.rstrip("\n"))
        if m is None:
            buf.append(line)
            continue
        if cur is None:
            header = "".join(buf)
        else:
            sections[cur] = "".join(buf)
        if m.group(1) in sections or m.group(1) == cur:
            raise KernelError(f"section {m.group(1)!r} appears twice in {name}.wgsl", where=f"kernels/{name}.wgsl")
        cur, buf = m.group(1), []
    if cur is None:
        header = "".join(buf)
    else:
        sections[cur] = "".join(buf)
        header = header.rstrip("\n") + "\n"       # the blank lines before the first section are no part of it
    return header, sections


def sections(name: str, prefix: str = "") -> list[str]:
    """The section names of kernels/<name>.wgsl that start with `prefix`, in file order (prefix dropped)."""
    return [s[len(prefix):] for s in _parts(name)[1] if s.startswith(prefix)]


def _section(name: str, section: str) -> str:
    secs = _parts(name)[1]
    if section not in secs:
        raise KernelError(f"{name}.wgsl has no section {section!r}", where=f"kernels/{name}.wgsl",
                          hint=f"sections: {', '.join(secs) or 'none'}")
    return secs[section]


def _expand(text: str, flags: Mapping[str, bool], where: str, stack: tuple = ()) -> str:
    """Resolve #include lines (recursively) and #if / #else / #endif blocks."""
    out, keep = [], [True]       # keep[-1]: whether lines at this depth are emitted
    opened = []                  # per open #if: (its condition, whether #else was seen)
    for line in text.splitlines(keepends=True):
        m = _DIRECTIVE.match(line.rstrip("\n"))
        if m is None:
            if keep[-1]:
                out.append(line)
            continue
        indent, word, arg = m.groups()
        if word == "if":
            if arg not in flags:
                raise KernelError(f"#if {arg} in {where}: no flag {arg!r} given", where=where,
                                  hint=f"flags given: {', '.join(sorted(flags)) or 'none'}")
            opened.append([bool(flags[arg]), False])
            keep.append(keep[-1] and bool(flags[arg]))
        elif word in ("else", "endif"):
            if not opened:
                raise KernelError(f"#{word} without #if in {where}", where=where)
            keep.pop()
            if word == "else":
                if opened[-1][1]:
                    raise KernelError(f"two #else for one #if in {where}", where=where)
                opened[-1][1] = True
                keep.append(keep[-1] and not opened[-1][0])
            else:
                opened.pop()
        elif keep[-1]:           # include
            file, _, sec = arg.partition(":")
            if not sec:
                raise KernelError(f"#include {arg!r} in {where} names no section", where=where,
                                  hint="write #include file:section")
            if (file, sec) in stack:
                raise KernelError(f"#include cycle: {' -> '.join(f'{f}:{s}' for f, s in stack + ((file, sec),))}",
                                  where=where)
            body = _expand(textwrap.dedent(_section(file, sec)).strip("\n"), flags, f"kernels/{file}.wgsl",
                           stack + ((file, sec),))
            out.append(textwrap.indent(body, indent) + "\n")
    if opened:
        raise KernelError(f"#if without #endif in {where}", where=where)
    return "".join(out)


def _fill(text: str, subs: Mapping[str, object], where: str) -> str:
    """Put the values in for the {{NAME}} placeholders (values are not scanned again)."""
    left: set = set()

    def val(key: str):
        if key not in subs:
            left.add(key)
            return ""
        return str(subs[key])

    out = []
    for line in text.splitlines(keepends=True):
        m = _ALONE.match(line.rstrip("\n"))
        if m is not None:
            v = val(m.group(2))
            out.append(textwrap.indent(v, m.group(1)) + ("\n" if line.endswith("\n") else ""))
        else:
            out.append(_PLACE.sub(lambda mm: val(mm.group(1)), line))
    if left:
        raise KernelError(f"template {where} has unfilled placeholders {sorted(left)}", where=where)
    return "".join(out)


def _key(flags, subs):
    return tuple(sorted((flags or {}).items())), tuple(sorted((k, str(v)) for k, v in subs.items()))


def render(name: str, section: str | None = None, *, flags: Mapping[str, bool] | None = None, **subs) -> str:
    """Kernel source: the header of kernels/<name>.wgsl, then `section` if given, expanded and filled."""
    return _render(name, section, *_key(flags, subs))


@functools.lru_cache(maxsize=4096)
def _render(name, section, flags, subs):
    where = f"{name}.wgsl" + (f":{section}" if section else "")
    text = _parts(name)[0] + ("\n" + _section(name, section).lstrip("\n") if section is not None else "")
    return _fill(_expand(text, dict(flags), where), dict(subs), where)


def snippet(name: str, section: str, *, flags: Mapping[str, bool] | None = None, **subs) -> str:
    """A piece of code: section `section` of kernels/<name>.wgsl, dedented, without its surrounding blank
    lines and its own full-line `//` comments, expanded and filled (for a placeholder of a kernel)."""
    return _snippet(name, section, *_key(flags, subs))


@functools.lru_cache(maxsize=4096)
def _snippet(name, section, flags, subs):
    where = f"{name}.wgsl:{section}"
    body = "".join(ln for ln in _section(name, section).splitlines(keepends=True)
                   if not ln.lstrip().startswith("//"))
    return _fill(_expand(textwrap.dedent(body).strip("\n"), dict(flags), where), dict(subs), where).strip("\n")


def enable_f16(*dtypes) -> str:
    """The `enable f16;` directive when any of `dtypes` is f16, else nothing (for a kernel's {{ENABLE}})."""
    return snippet("common", "enable_f16") if any(d == "f16" for d in dtypes) else ""


def bindings(*operands: tuple[str, str], first: int = 1) -> str:
    """Storage declarations for (name, dtype) operands at @binding(first), (first + 1), ... (a {{BINDINGS}})."""
    return "\n".join(snippet("common", "binding", I=first + i, NAME=n, T=WGSL_TYPE[d])
                     for i, (n, d) in enumerate(operands))
