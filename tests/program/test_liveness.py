"""The arena plan: values alive at the same step never overlap, and reuse makes it smaller than the sum."""
import numpy as np

import scellis_jupyter as sc
from scellis_jupyter import ops
from scellis_jupyter.program import compile_program


def test_no_overlap_and_reuse():
    ref = sc.device("reference")
    x = sc.tensor(np.ones((64, 64), np.float32), device=ref, requires_grad=True)
    h = x
    for _ in range(6):
        h = ops.tanh(h @ x + 1.0)
    prog, _ = compile_program([h.sum().node], "reference", "debug")
    a = prog.arena
    items = list(a.offsets)
    for i in items:
        for j in items:
            if i < j:
                (s1, e1), (s2, e2) = a.lifetimes[i], a.lifetimes[j]
                if not (e1 < s2 or e2 < s1):
                    assert a.offsets[i] + a.sizes[i] <= a.offsets[j] or a.offsets[j] + a.sizes[j] <= a.offsets[i]
    assert a.live_peak_bytes <= a.arena_bytes < sum(a.sizes.values())
    # the executor follows the plan: the reference backend's arena is exactly the planned size
    before = ref.impl._arena.nbytes
    h.sum().numpy()
    assert ref.impl._arena.nbytes == max(before, a.arena_bytes)
