"""PEFT targets on a model with named nodes: by op name, by node name or key, by glob.

Why: `select_weights` used to find a weight's node from the first two parts of its name, which is the
key of an unnamed node ("3.transformer_block") but not of a named one: "enc.attn.q.weight" gave
"enc.attn", so targeting op "transformer_block" missed every named block and LoRA refused the spec.
The expected sets are written out here from the spec's nodes.
"""
from __future__ import annotations

import pytest

import scellis_jupyter as sc
from scellis_jupyter import catalog
from scellis_jupyter.catalog.peft import select_weights

from fixtures import spec_text

NAMED = spec_text("named_nodes")

BLOCK = ["attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight", "mlp.fc1.weight", "mlp.fc2.weight"]
ENC = [f"enc.{w}" for w in BLOCK]
UNNAMED = [f"3.transformer_block.{w}" for w in BLOCK]


@pytest.fixture(scope="module")
def graph():
    return sc.Spec.from_text(NAMED).graph


@pytest.mark.parametrize("targets,want", [
    (["transformer_block"], ENC + UNNAMED),                 # by op: the named block and the unnamed one
    (["linear"], ENC + UNNAMED + ["head.weight"]),          # the spec's default: every linear projection
    (["enc"], ENC),                                         # by node name
    (["head"], ["head.weight"]),                            # a named linear node
    (["3.transformer_block"], UNNAMED),                     # by an unnamed node's key
    (["enc", "head"], ENC + ["head.weight"]),
    (["*.attn.q.weight"], ["enc.attn.q.weight", "3.transformer_block.attn.q.weight"]),   # globs still work
    (["enc.mlp.*"], ["enc.mlp.fc1.weight", "enc.mlp.fc2.weight"]),
])
def test_select_weights_by_op_node_and_glob(graph, targets, want):
    assert [p.name for p in select_weights(graph, targets)] == want


@pytest.mark.parametrize("targets,want", [(["transformer_block"], ENC + UNNAMED), (["enc"], ENC),
                                          (["head"], ["head.weight"])])
def test_lora_adapts_the_named_nodes_targeted(graph, targets, want):
    adapt = catalog.make("peft", "lora", targets=targets).apply(graph)
    assert sorted(adapt.transforms) == sorted(want)
    a_names = {p.name for p in adapt.new_params if p.name.endswith("lora_A")}
    assert a_names == {w.removesuffix(".weight") + ".lora_A" for w in want}


def test_a_target_matching_nothing_is_refused_with_the_weights_named(graph):
    with pytest.raises(catalog.CatalogError) as e:
        catalog.make("peft", "lora", targets=["decoder"]).apply(graph)
    assert "match no 2-D linear weight" in str(e.value) and "enc.attn.q.weight" in e.value.diagnostic.hint
