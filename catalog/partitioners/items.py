"""One shard per item (or per `chunk` items) of the job's `items` input: sweeps, ensembles, batches."""
from __future__ import annotations

from scellis_jupyter.catalog import Param, partitioner


@partitioner("items", summary="one shard per item (or per chunk of items) of inputs['items']", params={
    "chunk": Param(int, 1, lo=1, doc="items per shard"),
})
class Items:
    def __init__(self, chunk=1):
        self.chunk = chunk

    def __call__(self, inputs: dict) -> list:
        items = list(inputs.get("items", []))
        if self.chunk == 1:
            return items
        return [items[i:i + self.chunk] for i in range(0, len(items), self.chunk)]
