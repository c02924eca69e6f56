"""Spec text edits: fixes and node edits round-trip (edit -> text -> parse) to the graph a hand-edited spec gives,
keep the user's comments, and each applied fix re-plans to the peak the fix predicted."""
from __future__ import annotations

import pytest

import scellis_jupyter as sc
from scellis_jupyter.spec.edit import EditError, apply_edit, apply_fix, graph_info

TEXT = """# digits MLP
[data]
dataset = "digits"   # the built-in set

[model]
nodes = [
  { name = "hidden", op = "linear", out = 64 },   # wide enough
  { op = "relu" },
  { name = "logits", op = "linear", out = 10 },
]

[recipe]
batch_size = 64
optimizer = { name = "adam", lr = 0.01 }
"""


def _same(a: str, b: str) -> None:
    sa, sb = sc.Spec.from_text(a), sc.Spec.from_text(b)
    assert sa.hash == sb.hash                           # the same parsed content
    assert graph_info(sa) == graph_info(sb)


@pytest.mark.parametrize("edit, by_hand", [
    ({"action": "set", "node": "hidden", "key": "out", "value": 128},
     TEXT.replace('op = "linear", out = 64', 'op = "linear", out = 128')),
    ({"action": "set", "node": "hidden", "key": "bias", "value": False},
     TEXT.replace('out = 64 }', 'out = 64, bias = false }')),
    ({"action": "add", "after": "1.relu", "op": "dropout", "attrs": {"p": 0.25}},
     TEXT.replace('  { op = "relu" },\n', '  { op = "relu" },\n  { op = "dropout", p = 0.25 },\n')),
    ({"action": "add", "after": None, "op": "layer_norm", "attrs": {}},
     TEXT.replace('nodes = [\n', 'nodes = [\n  { op = "layer_norm" },\n')),
    ({"action": "remove", "node": "1.relu"}, TEXT.replace('  { op = "relu" },\n', '')),
])
def test_node_edits_round_trip(edit, by_hand):
    new = apply_edit(TEXT, edit)
    _same(new, by_hand)
    assert "# wide enough" in new and "# the built-in set" in new and new.startswith("# digits MLP")


def test_graph_info_format():
    info = graph_info(sc.Spec.from_text(TEXT))
    assert [n["id"] for n in info["nodes"]] == ["hidden", "1.relu", "logits"]
    assert info["edges"] == [["input", "hidden"], ["hidden", "1.relu"], ["1.relu", "logits"]]
    assert [n["params"] for n in info["nodes"]] == [64 * 64 + 64, 0, 64 * 10 + 10]
    assert info["nodes"][0]["shape"] == [64] and info["input"]["shape"] == [64]
    assert info["nodes"][0]["attrs"]["out"] == 64


def test_array_of_tables_form():
    text = '[data]\ndataset = "iris"\n\n[[model.nodes]]\nop = "linear"\nout = 8\n\n[[model.nodes]]\nop = "relu"\n\n' \
           '[[model.nodes]]\nop = "linear"\nout = 3\n'
    new = apply_edit(text, {"action": "add", "after": "1.relu", "op": "dropout", "attrs": {"p": 0.1}})
    assert [n["op"] for n in graph_info(sc.Spec.from_text(new))["nodes"]] == ["linear", "relu", "dropout", "linear"]
    new = apply_edit(new, {"action": "set", "node": "0.linear", "key": "out", "value": 16})
    assert graph_info(sc.Spec.from_text(new))["nodes"][0]["shape"] == [16]


def test_every_applicable_fix_replans_to_its_predicted_peak():
    spec = sc.Spec.from_text(TEXT)
    base = sc.plan(spec, device="reference")
    cap = int(sc.plan(spec, device="reference", batch_size=4).peak_bytes * 1.02)
    p = sc.plan(spec, device="reference", memory=cap)
    assert p.verdict == "red" and p.fixes
    tried = 0
    for f in p.fixes:
        try:
            new = apply_fix(TEXT, f)
        except EditError as e:
            assert f.kind in ("shard_optimizer_state", "layer_relay") or None in f.settings.values(), e
            continue
        q = sc.plan(sc.Spec.from_text(new), device="reference", memory=cap, fixes=False)
        assert q.peak_bytes == f.peak_bytes and q.verdict == f.verdict, (f, q.peak_bytes)
        assert "# wide enough" in new
        tried += 1
    assert tried >= 2 and base.peak_bytes > cap


def test_edit_mistakes():
    with pytest.raises(EditError) as e:
        apply_edit(TEXT, {"action": "set", "node": "hiden", "key": "out", "value": 3})
    assert "did you mean 'hidden'" in e.value.diagnostic.hint
    with pytest.raises(EditError) as e:
        apply_edit(TEXT, {"action": "delete", "node": "hidden"})
    assert "actions: set, add, remove" in e.value.diagnostic.hint
    from scellis_jupyter.plan.plan import Fix
    with pytest.raises(EditError) as e:
        apply_fix(TEXT, Fix("shard_optimizer_state", "shard", 10, "green", {"shard": 2}))
    assert "several devices" in e.value.diagnostic.message
    with pytest.raises(EditError):
        apply_fix(TEXT, Fix("batch_size", "none fits", 10, "red", {"batch_size": None}))
