"""WGSL templates from kernels/*.wgsl: named sections, includes, `#if` blocks and `{{NAME}}` placeholders.

Why: every line of shader text lives in kernels/, where it reads as WGSL; a launcher only picks a file
(and a section of it), switches `#if` blocks, fills placeholders, binds and dispatches. Where a launcher
generates code (a fused group's instruction list, the unrolled matmul tile) it assembles named
snippets of a .wgsl file, never text of its own. The grammar (kernels/README.md says more):

    //=== name            starts section `name` (up to the next marker); the text above the first
                          marker is the file's header
    #include file:name    (alone on a line) section `name` of kernels/file.wgsl, expanded in place
    #if FLAG / #else / #endif    kept or dropped by the `flags` given (nestable)
    {{NAME}}              the value given for NAME; alone on a line, every line of the value is
                          indented like the placeholder. A placeholder left unfilled is an error.
"""
from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Mapping

from ...errors import KernelError
from .kernels_path import kernel_source

WGSL_TYPE = {"f32": "f32", "f16": "f16", "i32": "i32", "u32": "u32", "bool": "u32"}

_MARK = re.compile(r"^//=== *(\S+) *$")
_DIRECTIVE = re.compile(r"^([ \t]*)#(include|if|else|endif)\b *(\S*) *$")
_ALONE = re.compile(r"^([ \t]*)\{\{(\w+)\}\}[ \t]*$")
_PLACE = re.compile(r"\{\{(\w+)\}\}")
_CACHE_MAX = 4096


class Templates:
    """Templates read by `read(name)` (the text of kernels/<name>.wgsl), parsed once, renders cached."""

    def __init__(self, read: Callable[[str], str]):
        self._read = read
        self._parsed: dict = {}
        self._cache: dict = {}

    def parts(self, name: str) -> tuple[str, dict]:
        """(header, {section: text}) of file `name`."""
        got = self._parsed.get(name)
        if got is None:
            got = self._parsed[name] = _split(self._read(name), name)
        return got

    def sections(self, name: str, prefix: str = "") -> list[str]:
        """The section names of file `name` that start with `prefix`, in file order, prefix dropped."""
        return [s[len(prefix):] for s in self.parts(name)[1] if s.startswith(prefix)]

    def section(self, name: str, section: str) -> str:
        secs = self.parts(name)[1]
        if section not in secs:
            raise KernelError(f"{name}.wgsl has no section {section!r}", where=f"kernels/{name}.wgsl",
                              hint=f"its sections: {', '.join(secs) or 'none'}")
        return secs[section]

    def render(self, name: str, section: str | None = None, *, flags: Mapping[str, bool] | None = None,
               **subs) -> str:
        """A kernel's source: the header of file `name`, then `section` if given; expanded and filled."""
        key = ("render", name, section, _frozen(flags), _frozen(subs))
        src = self._cache.get(key)
        if src is None:
            where = f"{name}.wgsl" + (f":{section}" if section else "")
            text = self.parts(name)[0]
            if section is not None:
                text += "\n" + self.section(name, section).strip("\n") + "\n"
            own = ((name, section),) if section is not None else ()
            src = self._remember(key, _fill(self._expand(text, dict(flags or {}), where, own), subs, where))
        return src

    def snippet(self, name: str, section: str, *, flags: Mapping[str, bool] | None = None, **subs) -> str:
        """A piece of code for a placeholder: section `section` of file `name`, dedented, without its
        full-line `//` comments and surrounding blank lines; expanded and filled."""
        key = ("snippet", name, section, _frozen(flags), _frozen(subs))
        src = self._cache.get(key)
        if src is None:
            where = f"{name}.wgsl:{section}"
            body = "".join(ln for ln in self.section(name, section).splitlines(keepends=True)
                           if not ln.lstrip().startswith("//"))
            text = self._expand(textwrap.dedent(body).strip("\n"), dict(flags or {}), where, ((name, section),))
            src = self._remember(key, _fill(text, subs, where).strip("\n"))
        return src

    def _remember(self, key, src: str) -> str:
        if len(self._cache) >= _CACHE_MAX:       # eager runs make many distinct fused bodies
            self._cache.clear()
        self._cache[key] = src
        return src

    def _expand(self, text: str, flags: dict, where: str, stack: tuple = ()) -> str:
        """Resolve #include lines (recursively, same flags) and #if / #else / #endif blocks."""
        out, keep, opened = [], [True], []      # keep[-1]: emit lines here; opened: [condition, saw #else]
        for line in text.splitlines(keepends=True):
            m = _DIRECTIVE.match(line.rstrip("\n"))
            if m is None:
                if keep[-1]:
                    out.append(line)
                continue
            indent, word, arg = m.groups()
            if word == "if":
                if arg not in flags:
                    raise KernelError(f"#if {arg} in {where}: no flag {arg!r} was given", where=where,
                                      hint=f"flags given: {', '.join(sorted(flags)) or 'none'}")
                opened.append([bool(flags[arg]), False])
                keep.append(keep[-1] and bool(flags[arg]))
            elif word in ("else", "endif"):
                if not opened:
                    raise KernelError(f"#{word} without #if in {where}", where=where)
                keep.pop()
                if word == "endif":
                    opened.pop()
                elif opened[-1][1]:
                    raise KernelError(f"a second #else for one #if in {where}", where=where)
                else:
                    opened[-1][1] = True
                    keep.append(keep[-1] and not opened[-1][0])
            elif keep[-1]:                       # #include file:section
                file, _, sec = arg.partition(":")
                if not file or not sec:
                    raise KernelError(f"#include {arg!r} in {where} names no section", where=where,
                                      hint="write #include file:section")
                if (file, sec) in stack:
                    chain = " -> ".join(f"{f}:{s}" for f, s in stack + ((file, sec),))
                    raise KernelError(f"#include cycle {chain}", where=where)
                body = textwrap.dedent(self.section(file, sec)).strip("\n")
                body = self._expand(body, flags, f"{file}.wgsl:{sec}", stack + ((file, sec),))
                out.append(textwrap.indent(body, indent).rstrip("\n") + "\n")
        if opened:
            raise KernelError(f"#if without #endif in {where}", where=where)
        return "".join(out)


def _split(text: str, name: str) -> tuple[str, dict]:
    header, secs, cur, buf = "", {}, None, []
    for line in text.splitlines(keepends=True):
        m = _MARK.match(line.rstrip("\n"))
        if m is None:
            buf.append(line)
            continue
        if cur is None:
            header = "".join(buf)
        else:
            secs[cur] = "".join(buf)
        cur, buf = m.group(1), []
        if cur in secs:
            raise KernelError(f"section {cur!r} appears twice in {name}.wgsl", where=f"kernels/{name}.wgsl")
    if cur is None:
        return "".join(buf), {}
    secs[cur] = "".join(buf)
    return header.rstrip("\n") + "\n", secs     # the blank lines above the first section are no part of the header


def _fill(text: str, subs: Mapping, where: str) -> str:
    """Put the values in for the {{NAME}} placeholders (a value is not scanned again)."""
    left: set = set()

    def val(key: str) -> str:
        if key not in subs:
            left.add(key)
            return ""
        return str(subs[key])

    out = []
    for line in text.splitlines(keepends=True):
        m = _ALONE.match(line.rstrip("\n"))
        if m is not None:
            out.append(textwrap.indent(val(m.group(2)), m.group(1)) + ("\n" if line.endswith("\n") else ""))
        else:
            out.append(_PLACE.sub(lambda mm: val(mm.group(1)), line))
    if left:
        raise KernelError(f"template {where} has unfilled placeholders {sorted(left)}", where=where)
    return "".join(out)


def _frozen(d) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in (d or {}).items()))


KERNELS = Templates(kernel_source)
render = KERNELS.render
snippet = KERNELS.snippet
sections = KERNELS.sections


def enable_f16(*dtypes) -> str:
    """The `enable f16;` directive when any of `dtypes` is f16, else nothing (a kernel's {{ENABLE}})."""
    return snippet("common", "enable_f16") if any(d == "f16" for d in dtypes) else ""


def bindings(*operands: tuple[str, str], first: int = 1) -> str:
    """Storage declarations of (name, dtype) operands at @binding(first), (first + 1), ... (a {{BINDINGS}})."""
    return "\n".join(snippet("common", "binding", I=first + i, NAME=n, T=WGSL_TYPE[d])
                     for i, (n, d) in enumerate(operands))
