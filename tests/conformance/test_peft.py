"""Conformance over every registered PEFT entry (built-in and user), via the one `check_entry` path.

The peft checker makes each entry with defaults, applies it to a small MLP and a small causal transformer
(a CatalogError refusal is allowed where a method does not apply, but one model must apply), checks the
Adaptation's names against the model, info['factor'] against counts, and runs one SGD step on the
reference device (finite loss and updates, frozen params not updated).
"""
from __future__ import annotations

import pytest

from scellis_jupyter import catalog

NAMES = [e["name"] for e in catalog.list("peft")]


def test_all_six_builtins_registered():
    assert {"lora", "qlora", "bitfit", "ia3", "prompt_tuning", "prefix_tuning"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_entry_conforms(name):
    assert catalog.check_entry(catalog.get("peft", name)) == []


GOOD = '''
from scellis_jupyter.catalog import Param, peft
from scellis_jupyter.catalog.peft import SPEC_FILLED, Adaptation, with_factor

@peft("user_head_only", summary="train only the output layer", params=dict(SPEC_FILLED))
class HeadOnly:
    def __init__(self, rank=8, alpha=16.0, dropout=0.0, targets=None):
        pass
    def apply(self, graph):
        out = graph.spec.nodes[graph.output].key + "."
        return with_factor(graph, Adaptation(trainable={p.name for p in graph.params if p.name.startswith(out)}))
'''

BAD = '''
from scellis_jupyter.catalog import peft
from scellis_jupyter.catalog.peft import Adaptation, ParamDecl

@peft("user_bad_prefix", summary="adapter not under a node prefix")
class Bad:
    def apply(self, graph):
        return Adaptation(new_params=[ParamDecl("floating", (3,), "zeros", 3, 3, "adapter")], info={"factor": 0.5})
'''


def test_user_entry_loads_and_passes():
    try:
        catalog.load_source(GOOD, "peft_user_good", check=True)
        e = catalog.get("peft", "user_head_only")
        assert e.origin == "<cell:peft_user_good>" and catalog.check_entry(e) == []
    finally:
        catalog.unregister("peft", "user_head_only")


def test_broken_user_entry_is_refused_naming_the_check():
    with pytest.raises(catalog.CatalogError) as ei:
        catalog.load_source(BAD, "peft_user_bad", check=True)
    msg = str(ei.value)
    assert "new-params-prefix" in msg and "info-factor" in msg
    with pytest.raises(catalog.CatalogError):
        catalog.get("peft", "user_bad_prefix")
