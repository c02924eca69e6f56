"""Map key paths of a TOML text to the line:column they were written at.

Why: tomllib returns plain dicts with no positions, yet every spec diagnostic must point at the key or
value the user typed. This scanner walks the same text once (tables, arrays of tables, dotted keys,
inline tables, multi-line arrays, all string forms, comments) and records where each path starts.
It never raises: on text it cannot follow it keeps what it found, and lookups fall back to the nearest
located ancestor.
"""
from __future__ import annotations

import bisect
import tomllib
from typing import Iterable

Path = tuple  # of str (table keys) and int (array indices)

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_WS = " \t\r"


class _Stop(Exception):
    """The text ended or could not be followed; keep the positions found so far."""


class Locator:
    """Positions of keys and values in one TOML text; 1-based (line, col), col counted in characters."""

    def __init__(self, text: str):
        self.text = text
        self._starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        self.keys: dict[Path, int] = {}     # path -> offset of its key (array elements: of the element)
        self.values: dict[Path, int] = {}   # path -> offset of its value
        self._aot: dict[Path, int] = {}     # array-of-tables path -> number of [[...]] seen
        self._i = 0
        try:
            self._document()
        except (_Stop, IndexError):
            pass

    # ---- public ---------------------------------------------------------------------------------------
    def position(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self._starts, offset) - 1
        return line + 1, offset - self._starts[line] + 1

    def locate(self, path: Iterable, value: bool = False) -> tuple[int, int]:
        """(line, col) of `path`'s key (or value when `value`), else of its nearest located ancestor."""
        path = tuple(path)
        while True:
            if value and path in self.values:
                return self.position(self.values[path])
            if path in self.keys:
                return self.position(self.keys[path])
            if path in self.values:
                return self.position(self.values[path])
            if not path:
                return 1, 1
            path = path[:-1]
            value = False

    def exact(self, path: Iterable, value: bool = False) -> bool:
        """Whether `path` itself (not an ancestor) was located."""
        path = tuple(path)
        return path in (self.values if value else self.keys)

    # ---- scanning -------------------------------------------------------------------------------------
    def _peek(self, n: int = 1) -> str:
        return self.text[self._i:self._i + n]

    def _skip_ws(self) -> None:
        t, i = self.text, self._i
        while i < len(t) and t[i] in _WS:
            i += 1
        self._i = i

    def _skip_comment(self) -> None:
        if self._peek() == "#":
            j = self.text.find("\n", self._i)
            self._i = len(self.text) if j < 0 else j

    def _skip_blank(self) -> None:
        """Whitespace, newlines and comments (inside arrays and, leniently, inline tables)."""
        while self._i < len(self.text):
            self._skip_ws()
            if self._peek() == "#":
                self._skip_comment()
            elif self._peek() == "\n":
                self._i += 1
            else:
                return

    def _document(self) -> None:
        table: Path = ()
        while True:
            self._skip_blank()
            if self._i >= len(self.text):
                return
            if self._peek(2) == "[[":
                start = self._i
                self._i += 2
                table = self._header(start, array=True)
                self._skip_ws()
                self._expect("]]")
            elif self._peek() == "[":
                start = self._i
                self._i += 1
                table = self._header(start, array=False)
                self._skip_ws()
                self._expect("]")
            else:
                self._keyval(table)
            self._skip_ws()
            self._skip_comment()

    def _expect(self, s: str) -> None:
        if self._peek(len(s)) != s:
            raise _Stop
        self._i += len(s)

    def _header(self, start: int, array: bool) -> Path:
        parts = self._key()
        resolved: Path = ()
        for n, (k, off) in enumerate(parts):
            resolved += (k,)
            last = n == len(parts) - 1
            self.keys.setdefault(resolved, off)
            if last and array:
                count = self._aot.get(resolved, 0)
                self._aot[resolved] = count + 1
                resolved += (count,)
                self.keys.setdefault(resolved, start)
                self.values.setdefault(resolved, start)
            elif resolved in self._aot:  # a table under the latest element of an array of tables
                resolved += (self._aot[resolved] - 1,)
        if not array:
            self.keys[resolved] = parts[-1][1]
        return resolved

    def _key(self) -> list[tuple[str, int]]:
        """A dotted key as [(segment, offset)]."""
        parts = []
        while True:
            self._skip_ws()
            off = self._i
            c = self._peek()
            if c == '"' or c == "'":
                raw_end = self._string_end(self._i)
                raw = self.text[self._i:raw_end]
                self._i = raw_end
                try:
                    seg = tomllib.loads(f"k = {raw}")["k"]
                except tomllib.TOMLDecodeError:
                    seg = raw[1:-1]
            else:
                j = self._i
                while j < len(self.text) and self.text[j] in _BARE:
                    j += 1
                if j == self._i:
                    raise _Stop
                seg = self.text[self._i:j]
                self._i = j
            parts.append((seg, off))
            self._skip_ws()
            if self._peek() == ".":
                self._i += 1
                continue
            return parts

    def _keyval(self, table: Path) -> None:
        parts = self._key()
        path = table
        for k, off in parts:
            path = path + (k,)
            self.keys.setdefault(path, off)
        self._skip_ws()
        self._expect("=")
        self._skip_ws()
        self._value(path)

    def _string_end(self, i: int) -> int:
        """Offset just past the string starting at i (any of the four TOML string forms)."""
        t = self.text
        q = t[i]
        if t.startswith(q * 3, i):
            j = t.find(q * 3, i + 3)
            if q == '"':
                while j >= 0 and _escaped(t, j):
                    j = t.find(q * 3, j + 1)
            if j < 0:
                raise _Stop
            while t.startswith(q, j + 3):  # up to two quotes may end the content ("""a""""")
                j += 1
            return j + 3
        j = i + 1
        while j < len(t):
            c = t[j]
            if c == "\\" and q == '"':
                j += 2
                continue
            if c == q:
                return j + 1
            if c == "\n":
                break
            j += 1
        raise _Stop

    def _value(self, path: Path) -> None:
        self.values.setdefault(path, self._i)
        c = self._peek()
        if c == '"' or c == "'":
            self._i = self._string_end(self._i)
        elif c == "[":
            self._i += 1
            n = 0
            while True:
                self._skip_blank()
                if self._peek() == "]":
                    self._i += 1
                    return
                if not self._peek():
                    raise _Stop
                self.keys.setdefault(path + (n,), self._i)
                self._value(path + (n,))
                n += 1
                self._skip_blank()
                if self._peek() == ",":
                    self._i += 1
        elif c == "{":
            self._i += 1
            while True:
                self._skip_blank()
                if self._peek() == "}":
                    self._i += 1
                    return
                if not self._peek():
                    raise _Stop
                self._keyval(path)
                self._skip_blank()
                if self._peek() == ",":
                    self._i += 1
        else:  # number, bool, date/time: up to a delimiter
            t, j = self.text, self._i
            while j < len(t) and t[j] not in ",]}#\n":
                j += 1
            if j == self._i:
                raise _Stop
            self._i = j


def _escaped(t: str, j: int) -> bool:
    """Whether the character at j is preceded by an odd number of backslashes."""
    n = 0
    while j - n - 1 >= 0 and t[j - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def format_path(path: Iterable) -> str:
    """('model', 'nodes', 2, 'op') -> 'model.nodes[2].op', the spelling diagnostics use."""
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            seg = p if p and all(c in _BARE for c in p) else '"' + p.replace('"', '\\"') + '"'
            out += ("." if out else "") + seg
    return out
