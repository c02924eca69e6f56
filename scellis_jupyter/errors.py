"""One diagnostic format and one exception tree for every user-facing error, warning and refusal.

Why: the product promises that a spec typo, a shape conflict, a refused plan and a lost device all read
the same way: a code, what went wrong, where (op, spec line:col, device), and what to do about it. Every
error the library raises on purpose is a `ScellisError` carrying a `Diagnostic`; scripts tell them apart
by class (`except sc.PlanRefused`) or by the stable `diagnostic.code`. The tree::

    ScellisError                    base; .diagnostic (code, message, where, hint, details)
    ├── UsageError                  a bad command line (usage)
    │   ├── MagicError              a bad %scellis / %%scellis line or cell (magic)
    │   └── SettingError            a SCELLIS_* environment variable with a value it does not take (setting)
    ├── SpecError                   a spec that cannot be read or does not validate (spec); .diagnostics
    │   └── EditError               a fix or graph edit that cannot be written into the spec text (spec-edit)
    ├── CatalogError                an unknown entry, a bad hyper-parameter, a failed conformance check (catalog)
    │   └── TargetError             labels that do not fit what a loss declared (target)
    ├── DataError                   a dataset, file, split or loader request that cannot be honoured (data)
    ├── GraphError                  an ill-formed graph (graph)
    │   ├── ShapeError              shapes that do not agree (shape-mismatch)
    │   ├── DTypeError              a dtype an op does not take (unsupported-dtype)
    │   └── QuantizeError           weights that cannot be encoded as asked (quantize)
    ├── TierError                   an unknown or unmet determinism tier (determinism-tier)
    ├── DeviceError                 no such device, or one that failed (device)
    │   ├── KernelError             a WGSL kernel missing or failing to compile (kernel)
    │   └── DeviceGone              the device went away mid-run: the page closed or reloaded, or lost its GPU (device-gone)
    ├── PlanError                   a plan that cannot be made (plan)
    │   └── PlanRefused             a red plan: the run would not fit (plan-red); .diagnostic has the fixes
    ├── RunError                    a run that cannot start, go on or finish (run)
    │   ├── WaitTimeout             waiting for a run took longer than asked (wait-timeout)
    │   ├── LRFinderError           a learning-rate range test that cannot be made (lr-finder)
    │   ├── VerifyError             a run that cannot be re-checked as asked (verify)
    │   └── ProfileError            a profile that cannot be made: a run with no spec, bad counts (profile)
    ├── StoreError                  the store: unknown hash, full disk, read-only, schema (store-*)
    │   └── CorruptObject           an object whose bytes no longer match its name (store-corrupt)
    ├── PoolError                   a pool that cannot start, join or finish a Job (pool)
    │   ├── PoolUnreachable         a cluster address that does not answer in time (pool-unreachable)
    │   ├── RejectedResult          a shard no trustworthy worker could deliver a verified result for (pool-rejected)
    │   ├── TrustRefused            a Job or pool its trust regime does not allow (trust-refused)
    │   └── ShardRefused            a data-only shard a peer will not run: malformed, unknown op, an effect (shard-refused)
    ├── FederatedError              a federation that cannot start or finish a round (federated)
    │   ├── SiteUnavailable         sites that did not answer, fewer than the declared quorum (federated-quorum)
    │   ├── ModelVersionMismatch    a site update computed on another model version than asked (federated-version)
    │   ├── PrivacyBudgetExceeded   a round that would spend more (eps, delta) than declared (privacy-budget)
    │   └── SecureAggregationError  masks, shares or keys that do not check out (secagg)
    ├── LedgerError                 a receipt ledger that fails its chain or signatures (ledger)
    ├── NotebookError               a notebook whose run pins cannot be read or checked (notebook)
    └── WidgetError                 a widget action that cannot be done in the run's state (widget)
"""
from __future__ import annotations

import difflib
import sys
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


class UsageError(ScellisError):
    code = "usage"


class MagicError(UsageError, ValueError):
    code = "magic"


class SettingError(UsageError, ValueError):
    code = "setting"


class SpecError(ScellisError, ValueError):
    """A spec that cannot be read or does not validate; `where` is 'source:line:col'.

    `diagnostics` holds every problem found (the message shows the first).
    """

    code = "spec"

    def __init__(self, message: str, *, where: str = "", hint: str = "", code: str | None = None,
                 diagnostics: list[Diagnostic] | None = None, **details):
        super().__init__(message, where=where, hint=hint, code=code, **details)
        self.diagnostics = list(diagnostics) if diagnostics else [self.diagnostic]

    @property
    def where(self) -> str:
        return self.diagnostic.where

    @classmethod
    def from_diagnostics(cls, diags: list[Diagnostic]) -> "SpecError":
        d = diags[0]
        return cls(d.message, where=d.where, hint=d.hint, code=d.code, diagnostics=diags, **d.details)


class EditError(SpecError):
    code = "spec-edit"


class CatalogError(ScellisError, ValueError):
    code = "catalog"


class TargetError(CatalogError):
    """Labels that do not fit what the loss declared (wrong values or shape)."""

    code = "target"


class DataError(ScellisError, ValueError):
    """A dataset, file, split or loader request that cannot be honoured; `where` names file[:line]."""

    code = "data"


class GraphError(ScellisError, ValueError):
    code = "graph"


class ShapeError(GraphError):
    code = "shape-mismatch"


class DTypeError(GraphError, TypeError):
    code = "unsupported-dtype"


class QuantizeError(GraphError):
    code = "quantize"


class TierError(ScellisError, ValueError):
    code = "determinism-tier"


class DeviceError(ScellisError, RuntimeError):
    code = "device"


class KernelError(DeviceError):
    code = "kernel"


class DeviceGone(DeviceError):
    """The device went away under a run (the browser device's page closed or reloaded, its GPU lost): the run is
    left `interrupted` at its last checkpoint, never `running` or `failed`."""

    code = "device-gone"


class PlanError(ScellisError):
    code = "plan"


class PlanRefused(PlanError):
    """The plan is red: the run would not fit the device. Raised before any compute; the hint has the fixes."""

    code = "plan-red"


class RunError(ScellisError, RuntimeError):
    code = "run"


class WaitTimeout(RunError, TimeoutError):
    code = "wait-timeout"


class LRFinderError(RunError, ValueError):
    code = "lr-finder"


class VerifyError(RunError, ValueError):
    code = "verify"


class ProfileError(RunError, ValueError):
    code = "profile"


class StoreError(ScellisError, RuntimeError):
    code = "store"


class PoolError(ScellisError, RuntimeError):
    code = "pool"


class PoolUnreachable(PoolError, ConnectionError):
    code = "pool-unreachable"


class RejectedResult(PoolError):
    code = "pool-rejected"


class TrustRefused(PoolError):
    code = "trust-refused"


class ShardRefused(PoolError):
    code = "shard-refused"


class LedgerError(ScellisError, ValueError):
    code = "ledger"


class NotebookError(ScellisError, ValueError):
    code = "notebook"


class WidgetError(ScellisError, ValueError):
    code = "widget"


class CorruptObject(StoreError):
    """An object whose bytes no longer hash to its name, or that does not parse as what it claims to be."""

    code = "store-corrupt"


class FederatedError(ScellisError, RuntimeError):
    code = "federated"


class SiteUnavailable(FederatedError, TimeoutError):
    code = "federated-quorum"


class ModelVersionMismatch(FederatedError, ValueError):
    code = "federated-version"


class PrivacyBudgetExceeded(FederatedError):
    code = "privacy-budget"


class SecureAggregationError(FederatedError):
    code = "secagg"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A 'did you mean' hint for a misspelled name, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


# ---- notes: what the user is told that is not an error (the not-a-GPU banner, the default tier) ----------
def stderr_note(text: str) -> None:
    """The CLI's and a script's notes: stderr. Inside a Jupyter kernel (the API used without the extension)
    stderr renders as a red error box, so a note is a plain stdout line there."""
    in_kernel = type(sys.stderr).__module__.split(".")[0] == "ipykernel"
    print(text, file=sys.stdout if in_kernel else sys.stderr)


# Where notes go: stderr_note by default; `%load_ext scellis_jupyter` puts a displayed, neutral note here.
NOTICE: list = [stderr_note]


def notice(text: str) -> None:
    """Tell the user `text` through the current sink; a sink that fails falls back to stderr_note."""
    try:
        NOTICE[0](text)
    except Exception:                                   # noqa: BLE001 - a note must never stop a run
        stderr_note(text)
