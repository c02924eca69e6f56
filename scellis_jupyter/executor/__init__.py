"""Executor: runs a Program on a Backend with exactly the Program's arena plan."""
from ..backends.storage import Storage
from .executor import execute, realize, run_numpy
from .measure import measure_step

__all__ = ["Storage", "execute", "realize", "run_numpy", "measure_step"]
