"""Executor: runs a Program on a Backend with exactly the Program's arena plan."""
from .executor import Storage, execute, realize

__all__ = ["Storage", "execute", "realize"]
