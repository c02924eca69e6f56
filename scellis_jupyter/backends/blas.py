"""One BLAS thread for a process that uses the numpy reference path.

Why: OpenBLAS (0.3.31, numpy 2.4's) returns different bits for one product at 1 and at 2 threads, even at
64x64x128. A Dask worker starts with OPENBLAS_NUM_THREADS=1 and a notebook kernel with every core, so the
same step gave different losses in a worker and in the notebook: the reference path is the deterministic
oracle, and the debug tier promises bit-identical runs on it. Setting the count around each product does
not work (from a thread other than the main one OpenBLAS ignores it), so the first reference backend of a
process sets numpy's BLAS to one thread for the whole process, threads started later included. This
makes large products in the same process (the user's own numpy) single-threaded too (the README says so).
"""
from __future__ import annotations

import os
import threading

import numpy as np

_lock = threading.Lock()
_done = False
_pinned: list[str] = []


def pin_one_thread() -> list[str]:
    """Set every BLAS numpy loaded to one thread (once per process); returns the libraries set."""
    global _done
    with _lock:
        if _done:
            return list(_pinned)
        _done = True
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:                      # a dependency; without it nothing is pinned
            return []
        root = os.path.dirname(os.path.dirname(np.__file__))
        for lc in ThreadpoolController().lib_controllers:
            if lc.user_api == "blas" and lc.filepath.startswith(root):
                if lc.get_num_threads() != 1:
                    lc.set_num_threads(1)
                _pinned.append(lc.filepath)
        return list(_pinned)


def pinned() -> list[str]:
    """The BLAS libraries set to one thread so far."""
    return list(_pinned)
