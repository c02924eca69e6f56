"""One diagnostic format for every user-facing error, warning and refusal.

Why: the product promises that a spec typo, a shape conflict, a refused plan and a lost device all read
the same way: a code, what went wrong, where (op, spec line:col, device), and what to do about it.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable


# process exit codes of every command-line entry point (cli, the detached child, the quickstart)
EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_REFUSED, EXIT_TIMEOUT, EXIT_INTERRUPTED = 0, 1, 2, 3, 124, 130
EXIT_BROKEN_PIPE = 141             # 128 + SIGPIPE: the reader of stdout went away (`| head`)


@dataclass
class Diagnostic:
    code: str                      # stable machine-readable id, e.g. "shape-mismatch"
    message: str                   # one sentence: what is wrong
    where: str = ""                # op name / spec "file:line:col" / device name
    hint: str = ""                 # what to do about it
    details: dict = field(default_factory=dict)

    def format(self) -> str:
        head = f"error[{self.code}]"
        if self.where:
            head += f" at {self.where}"
        text = f"{head}: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def to_json(self) -> dict:
        return {"code": self.code, "message": self.message, "where": self.where, "hint": self.hint,
                "details": self.details}


class ScellisError(Exception):
    """Base of every error the library raises on purpose; carries a Diagnostic."""

    code = "error"

    def __init__(self, message: str, *, where: str = "", hint: str = "", code: str | None = None,
                 **details):
        self.diagnostic = Diagnostic(code or self.code, message, where, hint, details)
        super().__init__(self.diagnostic.format())


class ShapeError(ScellisError, ValueError):
    code = "shape-mismatch"


class DTypeError(ScellisError, TypeError):
    code = "unsupported-dtype"


class DeviceError(ScellisError, RuntimeError):
    code = "device"


class KernelError(ScellisError, RuntimeError):
    code = "kernel"


class TierError(ScellisError, ValueError):
    code = "determinism-tier"


class GraphError(ScellisError, ValueError):
    code = "graph"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A 'did you mean' hint for a misspelled name, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
