"""Determinism tiers: unknown names refused with a suggestion, the default announced once, tiers recorded."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import determinism
from scellis_jupyter.errors import TierError


def test_unknown_tier_suggests():
    with pytest.raises(TierError) as e:
        sc.set_tier("debg")
    assert e.value.diagnostic.code == "determinism-tier"
    assert "'debg'" in str(e.value) and "did you mean 'debug'" in str(e.value)
    with pytest.raises(TierError, match="debug, prod, fast"):
        determinism.check("zzz")
    with pytest.raises(TierError):
        with sc.tier("production"):
            pass


def test_tier_recorded_on_realized_tensors(ref):
    a = sc.tensor(np.arange(4.0), device=ref)
    assert a.tier is None                          # a leaf was not computed by a program
    t = (a * 2).realize("fast")
    assert t.tier == "fast"
    with sc.tier("prod"):
        u = (a + 1)
        u.numpy()
    assert u.tier == "prod"
    sc.set_tier("debug")
    try:
        v = a - 1
        v.numpy()
        assert v.tier == "debug"
    finally:
        sc.set_tier(None)


def test_tier_is_part_of_what_is_computed(ref):
    a = sc.tensor(np.arange(4.0), device=ref)
    x, y = (a * 3).realize("debug"), (a * 3).realize("prod")
    assert (x.tier, y.tier) == ("debug", "prod")
    assert np.array_equal(x.numpy(), y.numpy())


DEFAULT_CODE = """
import numpy as np, scellis_jupyter as sc
a = sc.tensor(np.ones(3))
b = a + 1; b.numpy()
c = b * 2; c.numpy()
print(b.tier, c.tier)
"""


def test_default_tier_announced_once(run_python):
    r = run_python(DEFAULT_CODE, SCELLIS_DEVICE="reference")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["debug", "debug"]
    assert r.stderr.count("no determinism tier named") == 1
    assert "using 'debug'" in r.stderr


def test_named_tier_is_not_announced(run_python):
    r = run_python("import numpy as np, scellis_jupyter as sc\nsc.set_tier('prod')\n" + DEFAULT_CODE.split("\n", 2)[2],
                   SCELLIS_DEVICE="reference")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["prod", "prod"]
    assert "no determinism tier named" not in r.stderr
