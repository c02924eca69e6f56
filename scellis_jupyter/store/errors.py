"""The one error type of the store.

Why a single class with many codes: a corrupt object, an unknown hash, a full disk and a refused
checkpoint all need the same treatment by callers (show the diagnostic, stop), but scripts need to tell
them apart, which the stable `code` does: store-corrupt, store-unknown, store-ambiguous, store-readonly,
store-full, store-io, store-schema, store-missing, checkpoint-malformed, spec-mismatch, run-unknown,
run-state, bad-argument.
"""
from __future__ import annotations

import errno

from ..errors import CorruptObject, StoreError  # noqa: F401 - the store's errors, importable from here


def os_error(e: OSError, *, action: str, where: str) -> StoreError:
    """Translate an OSError from the file system into a StoreError that says what to do."""
    if e.errno == errno.EROFS:
        return StoreError(f"cannot {action}: the store is on a read-only file system", where=where,
                          hint="point SCELLIS_STORE (or --store) at a writable directory",
                          code="store-readonly", errno=e.errno)
    if e.errno in (errno.EACCES, errno.EPERM):
        return StoreError(f"cannot {action}: permission denied", where=where,
                          hint="make the store directory writable, or use another one (SCELLIS_STORE / --store)",
                          code="store-readonly", errno=e.errno)
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreError(f"cannot {action}: no space left on the device", where=where,
                          hint="free disk space (e.g. `scellis gc`) or move the store; nothing was written",
                          code="store-full", errno=e.errno)
    return StoreError(f"cannot {action}: {e.strerror or e}", where=where, code="store-io", errno=e.errno)
