"""Prefix tuning (Li & Liang 2021): learned key/value prefixes for every attention layer.

Why a hook that recomputes attention: the prefixes enter K and V, not the layer input, so the hooked
node (attention or transformer_block) is recomputed with concat(prefix, K) and concat(prefix, V). The
engine's causal mask is aligned to the bottom right (query i sees keys up to i + Lk - Lq), so with P
prefix columns in front every query sees all prefixes and the causal past of the real sequence, as the
method requires. The prefixes are trained directly (no reparameterization MLP, as PEFT's default).
A transformer_block with dropout > 0 is refused: its hook has no dropout stream to replay.
"""
from __future__ import annotations

from scellis_jupyter.catalog import CatalogError, Param, peft
from scellis_jupyter.catalog.peft import SPEC_FILLED, Adaptation, ParamDecl, attrs_of, node_keys, with_factor
from scellis_jupyter.graph import functional as F

ACT = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "tanh": F.tanh}


def _lin(x, loc, name):
    return F.linear(x, loc[name + "weight"], loc.get(name + "bias"))


def prefixed_mha(x, loc, pre: str, heads: int, causal: bool, P: int):
    """Multi-head self-attention of x [B, L, D] with P learned key/value prefixes (loc[pre+'prefix_k'/'_v'])."""
    b, L, d = x.shape
    dh = d // heads

    def split(t, n):
        return F.permute(F.reshape(t, (b, n, heads, dh)), (0, 2, 1, 3))

    def with_prefix(t, which):
        pk = F.expand(F.reshape(loc[f"prefix_{which}"], (1, P, d)), (b, P, d))
        return F.concat([split(pk, P), split(t, L)], axis=2)
    q = split(_lin(x, loc, pre + "q."), L)
    k = with_prefix(_lin(x, loc, pre + "k."), "k")
    v = with_prefix(_lin(x, loc, pre + "v."), "v")
    y = F.attention(q, k, v, causal=causal)
    return _lin(F.reshape(F.permute(y, (0, 2, 1, 3)), (b, L, d)), loc, pre + "o.")


def _norm(x, loc, pre, a):
    d = x.shape[-1]
    if a["norm"] == "rms_norm":
        return F.rms_norm(x, d, loc[pre + "weight"], a["eps"])
    return F.layer_norm(x, d, loc[pre + "weight"], loc[pre + "bias"], a["eps"])


def attention_hook(a: dict, P: int):
    def hook(ins, loc, run):
        return prefixed_mha(ins[0], loc, "", a["heads"], a["causal"], P)
    return hook


def block_hook(a: dict, P: int):
    def hook(ins, loc, run):       # pre-norm block, as the transformer_block layer computes it
        x = ins[0]
        h = F.add(x, prefixed_mha(_norm(x, loc, "ln1.", a), loc, "attn.", a["heads"], a["causal"], P))
        m = _lin(ACT[a["activation"]](_lin(_norm(h, loc, "ln2.", a), loc, "mlp.fc1.")), loc, "mlp.fc2.")
        return F.add(h, m)
    return hook


@peft("prefix_tuning", summary="Prefix tuning (Li & Liang 2021): learned K/V prefixes in every attention",
      params={**SPEC_FILLED, "num_virtual_tokens": Param(int, 8, lo=1, hi=4096, doc="P: prefix length per attention layer")})
class PrefixTuning:
    def __init__(self, num_virtual_tokens=8, rank=8, alpha=16.0, dropout=0.0, targets=None):
        self.p = num_virtual_tokens

    def apply(self, graph) -> Adaptation:
        keys = node_keys(graph, ("attention", "transformer_block"))
        if not keys:
            raise CatalogError("prefix_tuning needs attention or transformer_block nodes", where="peft prefix_tuning",
                               hint="use prompt_tuning, lora or ia3 for models without attention")
        ad, P = Adaptation(), self.p
        ops = {graph.spec.nodes[i].key: graph.spec.nodes[i].op for i in graph.order}
        for k in keys:
            a = attrs_of(graph, k)
            d = graph.shapes[k][-1]
            if ops[k] == "transformer_block" and a.get("dropout", 0.0) > 0.0:
                raise CatalogError(f"prefix_tuning cannot recompute {k!r}: it has dropout = {a['dropout']}",
                                   where="peft prefix_tuning", hint="set dropout = 0 on the transformer_block")
            for which in ("k", "v"):
                ad.new_params.append(ParamDecl(f"{k}.prefix_{which}", (P, d), "normal", P, d, "adapter"))
            ad.node_hooks[k] = block_hook(a, P) if ops[k] == "transformer_block" else attention_hook(a, P)
        return with_factor(graph, ad, num_virtual_tokens=P)
