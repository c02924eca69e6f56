"""From bytes to a parsed TOML table, with a diagnostic for every way a file can fail to be a spec.

Why a module of its own: `tomllib` raises more than `TOMLDecodeError` (a `RecursionError` for arrays
nested a few hundred deep, a `ValueError` for an integer past Python's 4,300-digit limit), accepts lone
surrogates that no UTF-8 encoder can write back, and knows nothing of encodings. A spec file may hold
any bytes; each failure here becomes one `Diagnostic` at the line:col it starts, never a traceback.
"""
from __future__ import annotations

import codecs
import re
import tomllib
from typing import Any

from ..errors import Diagnostic
from .locate import Locator, format_path

MAX_DEPTH = 64                 # arrays / inline tables nested deeper than this are refused before parsing
UTF8_BOM = "\ufeff"
_OTHER_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
               (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))
_TOML_POS = re.compile(r"\(at line (\d+), column (\d+)\)")
_LONG_DIGITS = re.compile(r"[0-9A-Fa-f_]{4000,}")
_UTF8_HINT = "a spec is TOML text in UTF-8; re-save the file as UTF-8 (e.g. `iconv -f UTF-16 -t UTF-8 FILE`)"


def _diag(message: str, where: str, hint: str, kind: str, **details) -> Diagnostic:
    return Diagnostic("spec", message, where, hint, {"kind": kind, **details})


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def decode(data: bytes, source: str) -> tuple[str | None, Diagnostic | None]:
    """UTF-8 text of a spec file (a UTF-8 byte-order mark is dropped, as TOML readers do), or why not."""
    for bom, name in _OTHER_BOMS:
        if data.startswith(bom):
            return None, _diag(f"the file is {name} text (it starts with a {name} byte-order mark), not UTF-8",
                               f"{source}:1:1", _UTF8_HINT, "encoding", encoding=name)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    nul = data.find(b"\x00")
    if nul >= 0:                                 # valid UTF-8 perhaps, but no TOML text holds NUL
        head = data[:nul]
        line = head.count(b"\n") + 1
        col = len(head[head.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
        return None, _diag(f"the file holds NUL bytes (first at line {line}, column {col}): a binary file, or "
                           "UTF-16/UTF-32 without a byte-order mark", f"{source}:{line}:{col}", _UTF8_HINT,
                           "encoding")
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        head = data[:e.start]
        line = head.count(b"\n") + 1
        col = len(head[head.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
        return None, _diag(f"the file is not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}, column {col} "
                           f"({e.reason})", f"{source}:{line}:{col}", _UTF8_HINT, "encoding", byte=data[e.start])


def _too_deep(text: str, limit: int = MAX_DEPTH) -> int | None:
    """Offset of the first '[' or '{' nested deeper than `limit` (strings and comments skipped), else None."""
    depth, i, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c in "\"'":
            triple = text.startswith(c * 3, i)
            q = c * 3 if triple else c
            j = i + len(q)
            while j < n:
                if c == '"' and text[j] == "\\":
                    j += 2
                    continue
                if text.startswith(q, j):
                    break
                if not triple and text[j] == "\n":
                    break
                j += 1
            i = j + len(q)
            continue
        if c in "[{":
            depth += 1
            if depth > limit:
                return i
        elif c in "]}":
            depth = max(depth - 1, 0)
        i += 1
    return None


def _unusable(raw: Any) -> tuple[tuple, str] | None:
    """(key path, problem) of the first value no spec can mean: a key or string with a lone surrogate (it
    cannot be written back as UTF-8), an integer wider than 1,024 bits (no size, count or rate is)."""
    stack: list[tuple[tuple, Any]] = [((), raw)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, str):
            if any("\ud800" <= ch <= "\udfff" for ch in v):
                return path, "surrogate"
        elif isinstance(v, int) and not isinstance(v, bool):
            if v.bit_length() > 1024:
                return path, "huge"
        elif isinstance(v, dict):
            for k, x in v.items():
                if any("\ud800" <= ch <= "\udfff" for ch in k):
                    return path + (k,), "surrogate"
                stack.append((path + (k,), x))
        elif isinstance(v, list):
            stack.extend((path + (j,), x) for j, x in enumerate(v))
    return None


def parse(text: str, source: str) -> tuple[dict | None, Diagnostic | None, str]:
    """(table, None, text) for a TOML text, or (None, diagnostic, text); `text` is without a leading BOM."""
    if text.startswith(UTF8_BOM):
        text = text[1:]
    deep = _too_deep(text)
    if deep is not None:
        line, col = _line_col(text, deep)
        return None, _diag(f"arrays or inline tables are nested more than {MAX_DEPTH} levels deep",
                           f"{source}:{line}:{col}", "a spec needs a few levels at most; check the brackets",
                           "too-deep", limit=MAX_DEPTH), text
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        return None, syntax_diag(e, text, source), text
    except (ValueError, RecursionError) as e:     # e.g. an integer of more than 4,300 digits
        m = _LONG_DIGITS.search(text)
        line, col = _line_col(text, m.start()) if m else (1, 1)
        msg = "a number has too many digits to read" if m else f"the text cannot be read as TOML ({e})"
        return None, _diag(msg, f"{source}:{line}:{col}", "write numbers with at most a few dozen digits",
                           "syntax"), text
    bad = _unusable(raw)
    if bad is not None:
        path, problem = bad
        line, col = Locator(text).locate(path, True)
        where = f"{source}:{line}:{col}"
        if problem == "huge":
            return None, _diag(f"{format_path(path)} is an integer of more than 1,024 bits", where,
                               "no size, count or rate in a spec is that large", "range"), text
        return None, _diag(f"{format_path(path) or 'a key'} holds a lone surrogate escape (\\uD800-\\uDFFF), which is "
                           "not a character", where, "write the character itself, or its \\U0001XXXX escape",
                           "invalid"), text
    return raw, None, text


def syntax_diag(e: tomllib.TOMLDecodeError, text: str, source: str) -> Diagnostic:
    msg = str(e)
    m = _TOML_POS.search(msg)
    if m:
        line, col = int(m.group(1)), int(m.group(2))
        msg = msg[:m.start()].rstrip()
    else:  # "(at end of document)"
        lines = text.split("\n")
        line, col = len(lines), len(lines[-1]) + 1
        msg = re.sub(r"\s*\(at end of document\)", "", msg) + " at the end of the text"
    return _diag(f"TOML syntax error: {msg}", f"{source}:{line}:{col}", "check quotes, brackets and '=' on that line",
                 "syntax")
