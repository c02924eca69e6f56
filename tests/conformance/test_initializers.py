"""The initializer conformance suite over every registered entry, user entries included.

Why one suite: built-in and user initializers go through the same registry, so each must return a
float32 array of exactly the asked shape, finite, the same bits for the same stream state, and honour its
`random` declaration (random: the stream advances and another seed gives another array; not random: the
stream is untouched and the seed does not matter). A failing user entry is refused with the check named.
Numerics of the built-ins are in tests/catalog/test_initializers.py.
"""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from scellis_jupyter import catalog
from scellis_jupyter.spec.schema import KNOWN

INITIALIZERS = [e["name"] for e in catalog.list("initializer")]


def test_every_init_name_a_spec_may_use_is_registered():
    assert set(KNOWN["init"]) <= set(INITIALIZERS)
    for e in catalog.list("initializer"):
        assert e["summary"], f"{e['name']} has no summary"


@pytest.mark.parametrize("name", INITIALIZERS)
def test_conformance(name):
    assert catalog.check_entry(catalog.get("initializer", name)) == []


USER_INIT = '''
"""A user's initializer: scaled uniform noise around a constant."""
import numpy as np
from scellis_jupyter.catalog import Param, initializer


@initializer("{name}", summary="constant plus noise", params={{"val": Param(float, 0.5), "noise": Param(float, 0.1)}})
class Jitter:
    random = True

    def __init__(self, val=0.5, noise=0.1):
        self.val, self.noise = val, noise

    def __call__(self, shape, fan_in, fan_out, stream, name=""):
        {body}
'''
GOOD = "return (self.val + self.noise * (stream.uniform(shape) - 0.5)).astype(np.float32)"


def user_source(name, body=GOOD):
    return textwrap.dedent(USER_INIT.format(name=name, body=body))


def test_user_initializer_from_source(clean_registry):
    loaded = catalog.load_source(user_source("jitter_cell"), "cell-9", check=True)
    assert [e.name for e in loaded] == ["jitter_cell"]
    assert catalog.check_entry(catalog.get("initializer", "jitter_cell")) == []


@pytest.mark.parametrize("body,check", [
    ("return np.random.default_rng().random(shape).astype(np.float32)", "deterministic"),
    ("return np.full(shape, self.val, np.float32)", "stream-advanced"),
    ("return (self.val + stream.uniform(shape)).astype(np.float64)", "shape-dtype"),
    ("return (self.val + stream.uniform(shape)).astype(np.float32).ravel()", "shape-dtype"),
    ("return (stream.uniform(shape) / 0.0).astype(np.float32)", "finite"),
    ("raise KeyError(name)", "runs"),
])
def test_failing_user_initializers_are_refused_with_the_check_named(body, check, clean_registry):
    with pytest.raises(catalog.CatalogError) as e:
        with np.errstate(divide="ignore", invalid="ignore"):
            catalog.load_source(user_source("broken_init", body), "bad", check=True)
    assert any(f.startswith(check) for f in e.value.diagnostic.details["failed"]), e.value
    with pytest.raises(catalog.CatalogError):
        catalog.get("initializer", "broken_init")


class _Fixed:
    random = False

    def __call__(self, shape, fan_in, fan_out, stream, name=""):
        stream.uniform(shape)
        return np.zeros(shape, np.float32)


class _Undeclared:
    def __call__(self, shape, fan_in, fan_out, stream, name=""):
        return np.zeros(shape, np.float32)


@pytest.mark.parametrize("cls,check", [(_Fixed, "stream-untouched"), (_Undeclared, "interface")])
def test_random_declaration_is_checked(cls, check, clean_registry):
    with pytest.raises(catalog.CatalogError) as e:
        catalog.register("initializer", "bad_decl", cls, "broken", check=True)
    assert any(f.startswith(check) for f in e.value.diagnostic.details["failed"])
