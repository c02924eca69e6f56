"""Row blocks stacked back in shard order (the product of `row_blocks` matmul shards)."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import reducer


@reducer("concat_rows", summary="shard results stacked along axis 0 in shard order")
class ConcatRows:
    def leaf(self, index, result):
        return [(index, np.asarray(result))]

    def combine(self, a, b):
        return a + b

    def finish(self, acc):
        return np.concatenate([r for _, r in sorted(acc, key=lambda t: t[0])], axis=0)
