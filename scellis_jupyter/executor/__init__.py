"""Executor: runs a Program on a Backend with exactly the Program's arena plan."""
from ..backends.device import set_probe
from ..backends.storage import Storage
from .executor import execute, realize, run_numpy
from .measure import measure_step
from .probe import seconds_per_step

set_probe(seconds_per_step)          # what device("auto") times non-GPU candidates with (backends cannot import us)

__all__ = ["Storage", "execute", "realize", "run_numpy", "measure_step"]
