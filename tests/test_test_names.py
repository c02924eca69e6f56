"""pytest imports test modules by basename (no __init__.py in tests/): two files with one name break collection."""
from collections import Counter
from pathlib import Path


def test_test_module_names_are_unique():
    names = Counter(p.name for p in (Path(__file__).resolve().parent).rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
