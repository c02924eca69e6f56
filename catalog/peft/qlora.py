"""QLoRA (Dettmers et al. 2023): LoRA over base weights stored as NF4, dequantized inside the step.

Why stored, not cast: the target weights live in the Program as 4-bit codes (two per byte) plus one f32
absmax per block of 64, about 0.56 bytes per weight instead of 4, and `nf4_dequant` rebuilds the f32
weight where the forward needs it, so the plan's parameter bytes shrink by that ratio. The frozen NF4
weight has no gradient; only A and B train. Double quantization of absmax is not done (absmax stays f32).
Dropout: only 0, as for LoRA (a weight transform never sees the layer input).
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, peft
from scellis_jupyter.catalog.peft import (LORA_PARAMS, Adaptation, lora_adaptation, nf4_storage, targets_param,
                                          with_factor)

BLOCK = 64


@peft("qlora", summary="QLoRA (Dettmers et al. 2023): LoRA over NF4-stored frozen base weights", params={
    **LORA_PARAMS,
    "bits": Param(int, 4, lo=4, hi=4, doc="bits per stored weight: NF4 only"),
})
class QLoRA:
    def __init__(self, rank=8, alpha=16.0, dropout=0.0, targets=None, bits=4):
        self.rank, self.alpha, self.dropout, self.bits = rank, alpha, dropout, bits
        self.targets = targets_param(targets)

    def apply(self, graph) -> Adaptation:
        ad = lora_adaptation(graph, self.rank, self.alpha, self.targets, stored=lambda w: nf4_storage(w.shape, BLOCK))
        return with_factor(graph, ad, rank=self.rank, scale=self.alpha / self.rank, bits=self.bits, block=BLOCK)
