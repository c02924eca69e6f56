"""Prompt tuning (Lester et al. 2021): learned "virtual token" embeddings prepended to the input.

Why hooks: the prompt is a new input to the first embedding node's output, so that node's hook concatenates
it in front, every later layer sees P extra positions, and the virtual positions are dropped again before
the sequence leaves (at the model output, or at the first node that pools the sequence away), so the
loss sees exactly the original positions. Positions: a learned positional table is added to the real
tokens only, at their original positions 0..L-1; the virtual tokens get none (they are free vectors, a
position would only add a constant they can absorb). The real tokens therefore see exactly the
positions the base model was trained with, and max_len need not grow by P.
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, peft
from scellis_jupyter.catalog.peft import SPEC_FILLED, Adaptation, ParamDecl, node_keys, with_factor
from scellis_jupyter.graph import functional as F


def seq_nodes(graph, first: str) -> tuple[set, int]:
    """Keys of the nodes whose output still carries the (prompted) sequence after `first`, and L."""
    key = {i: graph.spec.nodes[i].key for i in graph.order}
    L = graph.shapes[first][0]
    seq, idx_first = {first}, next(i for i in graph.order if key[i] == first)
    for i in graph.needed:
        if i == idx_first:
            continue
        s = graph.shapes[key[i]]
        if any(d >= 0 and key[d] in seq for d in graph.deps[i]) and len(s) >= 2 and s[0] == L:
            seq.add(key[i])
    return seq, L


def strip(x, p):
    return F.getitem(x, (slice(None), slice(p, None)))


@peft("prompt_tuning", summary="Prompt tuning (Lester et al. 2021): learned virtual tokens before the input",
      params={**SPEC_FILLED, "num_virtual_tokens": Param(int, 8, lo=1, hi=4096, doc="P: prompt length")})
class PromptTuning:
    def __init__(self, num_virtual_tokens=8, rank=8, alpha=16.0, dropout=0.0, targets=None):
        self.p = num_virtual_tokens

    def apply(self, graph) -> Adaptation:
        embs = node_keys(graph, ("embedding",))
        if not embs:
            raise CatalogError("prompt_tuning needs an embedding node (token inputs)", where="peft prompt_tuning",
                               hint="use lora or ia3 for models without token embeddings")
        first, P = embs[0], self.p
        dim = graph.shapes[first][-1]
        name = f"{first}.prompt"
        ad = Adaptation(new_params=[ParamDecl(name, (P, dim), "normal", P, dim, "adapter")])

        def prepend(ins, loc, run):
            out = run(ins, loc)
            b = out.shape[0]
            prompt = F.expand(F.reshape(loc["prompt"], (1, P, dim)), (b, P, dim))
            return F.concat([prompt, out], axis=1)
        ad.node_hooks[first] = prepend
        seq, _ = seq_nodes(graph, first)
        key = {i: graph.spec.nodes[i].key for i in graph.order}
        for i in graph.needed:
            k, op = key[i], graph.spec.nodes[i].op
            if k in seq and op == "positional_embedding":
                def positions(ins, loc, run):
                    x = ins[0]
                    return F.concat([F.getitem(x, (slice(None), slice(0, P))), run([strip(x, P)], loc)], axis=1)
                ad.node_hooks[k] = positions
            elif k not in seq and any(d >= 0 and key[d] in seq for d in graph.deps[i]):
                def drop_in(ins, loc, run, _deps=[d >= 0 and key[d] in seq for d in graph.deps[i]]):
                    return run([strip(x, P) if s else x for x, s in zip(ins, _deps)], loc)
                ad.node_hooks[k] = drop_in
        out_key = key[graph.output]
        if out_key in seq:
            inner = ad.node_hooks.get(out_key)

            def drop_out(ins, loc, run, _inner=inner):
                y = _inner(ins, loc, run) if _inner else run(ins, loc)
                return strip(y, P)
            ad.node_hooks[out_key] = drop_out
        return with_factor(graph, ad, num_virtual_tokens=P)
