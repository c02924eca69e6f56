"""Every shard's result, in shard order (a sweep's cells, a k-fold's folds)."""
from __future__ import annotations

from scellis_jupyter.catalog import reducer


@reducer("collect", summary="the list of shard results in shard order")
class Collect:
    def leaf(self, index, result):
        return [(index, result)]

    def combine(self, a, b):
        return a + b

    def finish(self, acc):
        return [r for _, r in sorted(acc, key=lambda t: t[0])]
