"""LoRA (Hu et al. 2021): W_eff = W + (alpha / r) · B · A, with W frozen and only A, B training.

Why a weight transform: the low-rank update folds into the weight the layer already uses, so every
linear projection (inside attention and MLP blocks too) is adapted without touching the layers, and
`merge_lora` can fold it back for free inference. B starts at zero, so the first forward is the base
model's. Dropout on the adapter input (the paper's lora_dropout) needs the layer input, which a weight
transform never sees, so only dropout = 0 is accepted.
"""
from __future__ import annotations

from scellis_jupyter.catalog import peft
from scellis_jupyter.catalog.peft import LORA_PARAMS, Adaptation, lora_adaptation, targets_param, with_factor


@peft("lora", summary="LoRA (Hu et al. 2021): W + (alpha/r)·B·A on linear weights, base frozen", params=LORA_PARAMS)
class LoRA:
    def __init__(self, rank=8, alpha=16.0, dropout=0.0, targets=None):
        self.rank, self.alpha, self.dropout = rank, alpha, dropout
        self.targets = targets_param(targets)

    def apply(self, graph) -> Adaptation:
        ad = lora_adaptation(graph, self.rank, self.alpha, self.targets)
        return with_factor(graph, ad, rank=self.rank, scale=self.alpha / self.rank)
