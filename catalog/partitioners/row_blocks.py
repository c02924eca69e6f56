"""Row blocks of a matrix product: shard i computes A[rows_i] @ B (a Freivalds-checkable matmul shard)."""
from __future__ import annotations

import numpy as np

from scellis_jupyter.catalog import Param, partitioner


@partitioner("row_blocks", summary="split inputs['a'] into row blocks, each shard carrying (a_block, b)", params={
    "blocks": Param(int, 2, lo=1, doc="number of row blocks"),
})
class RowBlocks:
    def __init__(self, blocks=2):
        self.blocks = blocks

    def __call__(self, inputs: dict) -> list:
        a, b = np.asarray(inputs["a"]), np.asarray(inputs["b"])
        return [{"a": blk, "b": b} for blk in np.array_split(a, self.blocks) if len(blk)]
