"""BitFit (Ben Zaken et al. 2022): only the bias terms train; every weight stays frozen.

Why it is enough: biases are under 0.1% of a transformer's parameters yet shift every activation, which
the paper shows recovers much of full fine-tuning on small-to-medium data. `norms=True` also trains the
normalization gains and shifts (role 'norm'), a common variant.
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, peft
from scellis_jupyter.catalog.peft import SPEC_FILLED, Adaptation, is_default_targets, match, with_factor


@peft("bitfit", summary="BitFit (Ben Zaken et al. 2022): train only the biases", params={
    **SPEC_FILLED,
    "norms": Param(bool, False, doc="also train normalization parameters"),
    "targets": Param(list, None, optional=True, doc="globs restricting which biases train (['linear']: all)"),
})
class BitFit:
    def __init__(self, rank=8, alpha=16.0, dropout=0.0, targets=None, norms=False):
        self.norms = norms
        self.targets = None if is_default_targets(targets) else tuple(targets)

    def apply(self, graph) -> Adaptation:
        roles = ("bias", "norm") if self.norms else ("bias",)
        names = [p.name for p in graph.params if p.role in roles]
        if self.targets:
            names = match(names, self.targets)
        if not names:
            raise CatalogError("bitfit found no bias to train", where="peft bitfit",
                               hint="the model's layers have bias = false; enable biases, or use lora")
        return with_factor(graph, Adaptation(trainable=set(names)))
