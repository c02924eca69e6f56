"""LoRA (Hu et al. 2021): W_eff = W + (alpha / r) · B · A, with W frozen and only A, B training.

Why a weight transform: the low-rank update folds into the weight the layer already uses, so every
linear projection (inside attention and MLP blocks too) is adapted without touching the layers, and
`merge_lora` can fold it back for free inference. B starts at zero, so the first forward is the base
model's. Dropout on the adapter input (the paper's lora_dropout) needs the layer input, which a weight
transform never sees, so only dropout = 0 is accepted.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, peft
from scellis_jupyter.catalog.peft import Adaptation, lora_pairs, lora_transform, targets_param, with_factor

PARAMS = {
    "rank": Param(int, 8, lo=1, hi=4096, doc="r: inner dimension of B·A"),
    "alpha": Param(float, 16.0, lo=0.0, lo_open=True, doc="the update is scaled by alpha / r"),
    "dropout": Param(float, 0.0, lo=0.0, hi=0.0, doc="adapter-input dropout; only 0 (see module doc)"),
    "targets": Param(list, None, optional=True, doc="op names, node names or globs over param names (see "
                     "peft.select_weights); default every 2-D linear weight"),
}


@peft("lora", summary="LoRA (Hu et al. 2021): W + (alpha/r)·B·A on linear weights, base frozen", params=PARAMS)
class LoRA:
    def __init__(self, rank=8, alpha=16.0, dropout=0.0, targets=None):
        self.rank, self.alpha, self.dropout = rank, alpha, dropout
        self.targets = targets_param(targets)

    def apply(self, graph) -> Adaptation:
        ad = Adaptation()
        scale = self.alpha / self.rank
        pairs = lora_pairs(graph, self.rank, self.targets)
        for w, a, b in pairs:
            ad.new_params += [a, b]
            ad.transforms[w.name] = lora_transform(a.name, b.name, scale)
        # what merge_lora folds back: weight -> (A, B, scale)
        ad.info["lora"] = {w.name: (a.name, b.name, scale) for w, a, b in pairs}
        return with_factor(graph, ad, rank=self.rank, scale=scale)
