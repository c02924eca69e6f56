"""IA3 (Liu et al. 2022, "(IA)^3"): learned vectors rescale keys, values and the MLP hidden activations.

Why weight transforms: l ⊙ (W x + b) = (diag(l) W) x + l ⊙ b, so scaling k and v is a row scaling of
their weights and biases; the paper's feed-forward vector scales the hidden activation *after* the
nonlinearity, (l_ff ⊙ γ(W1 x)) W2^T, which is exactly a column scaling of W2 (fc2). All vectors start at
ones, so the first forward is the base model's. Models without attention (an MLP) get a vector on the
output of every hidden linear layer (all but the model's output layer), the same activation rescaling.
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, peft
from scellis_jupyter.catalog.peft import (SPEC_FILLED, Adaptation, ParamDecl, adapter_name, is_default_targets, match,
                                          node_keys, with_factor)
from scellis_jupyter.graph import functional as F

ATTN = ("attention", "transformer_block")


def _rows(l_name):
    def fn(w, params):
        l = params[l_name]
        return F.mul(w, F.reshape(l, (l.shape[0],) + (1,) * (len(w.shape) - 1)))
    return fn


def _cols(l_name):
    def fn(w, params):
        return F.mul(w, params[l_name])
    return fn


@peft("ia3", summary="IA3 (Liu et al. 2022): learned vectors scaling keys, values and MLP hidden", params={
    **SPEC_FILLED,
    "targets": Param(list, None, optional=True,
                     doc="globs over weight names to rescale; default (or ['linear']) k, v and fc2"),
})
class IA3:
    def __init__(self, rank=8, alpha=16.0, dropout=0.0, targets=None):
        self.targets = None if is_default_targets(targets) else tuple(targets)

    def _default(self, graph) -> tuple[list, list]:
        """(row-scaled weights, column-scaled weights)."""
        ws = [p.name for p in graph.params if p.role == "weight" and len(p.shape) == 2]
        attn = node_keys(graph, ATTN)
        if attn:
            rows = [n for n in ws if any(n.startswith(k + ".") for k in attn)
                    and (n.endswith("k.weight") or n.endswith("v.weight")) and n.split(".")[-2] in ("k", "v")]
            cols = [n for n in ws if n.endswith(".mlp.fc2.weight")]
            return rows, cols
        out = graph.spec.nodes[graph.output].key + "."
        return [n for n in ws if not n.startswith(out)], []

    def apply(self, graph) -> Adaptation:
        rows, cols = self._default(graph)
        if self.targets:
            keep = set(match(rows + cols, self.targets))
            rows, cols = [n for n in rows if n in keep], [n for n in cols if n in keep]
        if not rows and not cols:
            raise CatalogError("ia3 found nothing to rescale", where="peft ia3",
                               hint="IA3 needs attention k/v, an MLP hidden or hidden linear layers")
        decl = {p.name: p for p in graph.params}
        ad = Adaptation()
        for n, axis in [(n, 0) for n in rows] + [(n, 1) for n in cols]:
            w = decl[n]
            size = w.shape[axis]
            l = ParamDecl(adapter_name(n, "ia3_l"), (size,), "ones", size, size, "adapter")
            ad.new_params.append(l)
            ad.transforms[n] = _rows(l.name) if axis == 0 else _cols(l.name)
            bias = adapter_name(n, "bias")
            if axis == 0 and bias in decl:
                ad.transforms[bias] = _cols(l.name)         # l ⊙ b
        return with_factor(graph, ad, scaled=sorted(rows + cols))
