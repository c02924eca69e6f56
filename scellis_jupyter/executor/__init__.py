"""Executor: runs a Program on a Backend with exactly the Program's arena plan."""
from ..backends.storage import Storage
from .executor import execute, realize

__all__ = ["Storage", "execute", "realize"]
