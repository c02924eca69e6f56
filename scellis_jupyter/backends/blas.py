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

import functools
import os

import numpy as np


@functools.cache
def pin_one_thread() -> None:
    """Set every BLAS installed beside numpy (numpy's, scipy's) to one thread; once per process."""
    from threadpoolctl import ThreadpoolController          # a dependency; imported only when first used
    root = os.path.dirname(os.path.dirname(np.__file__))
    for lc in ThreadpoolController().lib_controllers:
        if lc.user_api == "blas" and lc.filepath.startswith(root):
            lc.set_num_threads(1)
