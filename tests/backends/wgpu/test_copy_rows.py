"""kernels/copy_rows.wgsl: copies whose innermost dim is contiguous on both sides (attention's head
permutes, row broadcasts, row slices, concat pieces) move 16-byte chunks with the box's shape baked in.
A copy moves bits, so each case must equal numpy exactly, and equal the strided kernel's result
(SCELLIS_WGPU_ROWS=off); the pipelines used show which path ran."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
R = np.random.default_rng(31)


def _run(build, *arrays):
    WG.impl.flush()
    WG.impl._records.clear()
    WG.impl._prog_params.clear()
    WG.impl._pipelines.clear()
    ts = [sc.tensor(a, device=WG) for a in arrays]
    got = sc.Tensor(build(*[t.node for t in ts]), WG).numpy()
    return got, [k for k in WG.impl._pipelines if k.startswith(("copy_rows", "elementwise"))]


CASES = {
    "head permute": (lambda x: F.permute(x, (0, 2, 1, 3)), [(2, 6, 10, 8)], lambda x: x.transpose(0, 2, 1, 3)),
    "permute keeping last": (lambda x: F.permute(x, (2, 0, 1, 3)), [(3, 5, 7, 12)], lambda x: x.transpose(2, 0, 1, 3)),
    "row broadcast": (lambda x: F.broadcast_to(x, (5, 3, 16)), [(3, 16)], lambda x: np.broadcast_to(x, (5, 3, 16))),
    "i32 permute": (lambda x: F.permute(x, (1, 0, 2)), [(4, 9, 8)], lambda x: x.transpose(1, 0, 2)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_row_copies_take_the_row_kernel_and_move_the_same_bits(name, monkeypatch):
    build, shapes, ref = CASES[name]
    dtype = np.int32 if name.startswith("i32") else np.float32
    arrays = [(R.standard_normal(s) * 100).astype(dtype) for s in shapes]
    got, used = _run(build, *arrays)
    assert got.dtype == dtype and np.array_equal(got, ref(*arrays))
    assert any(k.startswith("copy_rows") for k in used), used
    monkeypatch.setenv("SCELLIS_WGPU_ROWS", "off")
    off, used_off = _run(build, *arrays)
    assert not any(k.startswith("copy_rows") for k in used_off)
    assert np.array_equal(off.view(np.uint32), got.view(np.uint32))


@pytest.mark.parametrize("shape,perm", [((3, 5, 6), (1, 0, 2)),          # inner 6: not whole chunks
                                        ((4, 8, 8), (0, 2, 1))])          # inner dim moves
def test_other_copies_keep_the_strided_kernel(shape, perm):
    a = R.standard_normal(shape).astype(np.float32)
    got, used = _run(lambda x: F.permute(x, perm), a)
    assert np.array_equal(got, a.transpose(perm))
    assert not any(k.startswith("copy_rows") for k in used)


def test_a_row_slice_and_a_concat_of_rows():
    a = R.standard_normal((6, 5, 8)).astype(np.float32)
    b = R.standard_normal((6, 3, 8)).astype(np.float32)
    got, used = _run(lambda x, y: F.concat([x, y], 1), a, b)
    assert np.array_equal(got, np.concatenate([a, b], 1))
    assert any(k.startswith("copy_rows") for k in used)
