"""The aggregation conformance suite over every registered strategy, user entries included; a broken user
strategy is refused with the failed check named."""
from __future__ import annotations

import pytest

from scellis_jupyter import catalog

STRATEGIES = [e["name"] for e in catalog.list("aggregation")]


def test_every_builtin_strategy_is_there():
    assert {"fedavg", "fedprox", "scaffold", "diloco", "fedbuff"} <= set(STRATEGIES)


@pytest.mark.parametrize("name", STRATEGIES)
def test_conformance(name):
    assert catalog.check_entry(catalog.get("aggregation", name)) == []


def test_a_strategy_that_drifts_without_updates_is_refused(clean_registry):
    with pytest.raises(catalog.CatalogError, match="fixed-point: sites that did not move the model moved it"):
        catalog.load_source('''
from scellis_jupyter.catalog import aggregation
from scellis_jupyter.catalog.aggregations import Strategy

@aggregation("drifty")
class Drifty(Strategy):
    def aggregate(self, weights, total, count, state):
        return {k: v + 1.0 for k, v in weights.items()}, state
''', "drifty", check=True)
    assert "drifty" not in [e["name"] for e in catalog.list("aggregation")]
