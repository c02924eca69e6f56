"""The materialized-score attention path (kernels/attention_scores.py, kernels/attention_scores.wgsl):
which inputs take it, forward and every gradient against a dense float64 reference over several
chunks of heads (per-batch masks index the right heads in each chunk), fully masked rows, row
layouts of 32 to 256 threads, causal lengths past the matmul tiles (the banded products), determinism,
and the scratch a plan's dry run counts.

Tolerances: rtol 2e-4 / atol 2e-5, as for the flash kernels (f32 products over at most a few hundred
terms of O(1) values, then an f32 softmax).
"""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops
from scellis_jupyter.backends.wgpu.kernels import attention, attention_scores
from fixtures.attention import dense, philox_keep
from fixtures.devices import launch_keys

WG = sc.device("wgpu")


@pytest.fixture
def calls(monkeypatch):
    """Which path each attention launch took: ('scores_fwd' | 'scores_bwd', chunks) per call. Recorded
    programs are forgotten first: a graph seen before (in any test) would replay without its launchers."""
    seen = []
    WG.impl.forget_programs()

    def wrap(name, fn):
        def run(*a, **kw):
            (bh, lq, *_), (nb, qb) = a[-3], a[-2]             # dims; heads and query rows a chunk (then dropout)
            if WG.impl._mode != "dry":                        # a planning dry run (Dawn sizes its copies so) is no launch
                seen.append((name, -(-bh // nb) * -(-lq // qb)))   # (what, chunks)
            return fn(*a, **kw)
        monkeypatch.setattr(attention, name, run)
    wrap("scores_fwd", attention_scores.scores_fwd)
    wrap("scores_bwd", attention_scores.scores_bwd)
    yield seen
    WG.impl.forget_programs()      # programs recorded under a patched chunk budget must not replay later


def _run(q, k, v, g, causal, mask, dtype="f32", **kw):
    ts = [sc.tensor(a, dtype=dtype, device=WG, requires_grad=True) for a in (q, k, v)]
    m = sc.tensor(mask, device=WG) if mask is not None else None
    o = ops.attention(*ts, causal=causal, mask=m, **kw)
    o.backward(sc.tensor(g, dtype=dtype, device=WG))
    return [o.numpy()] + [t.grad.numpy() if hasattr(t.grad, "numpy") else sc.Tensor(t.grad, WG).numpy() for t in ts]


def _case(seed, batch, lq, lk, d, dv, mshape=None):
    r = np.random.default_rng(seed)
    arrs = [r.standard_normal(batch + shp).astype(np.float32) for shp in ((lq, d), (lk, d), (lk, dv), (lq, dv))]
    return arrs, ((r.random(mshape) > 0.3) if mshape is not None else None)


CASES = {  # batch, lq, lk, d, dv, causal, mask shape, score bytes a chunk may take (None: the default)
    "gpt-like-causal": ((2, 3), 64, 64, 16, 16, True, None, None),
    "chunks-per-batch-mask": ((3, 2), 20, 24, 8, 8, True, (3, 1, 20, 24), 20 * 24 * 4 * 2),   # 2 heads a chunk
    "chunks-key-padding": ((4, 3), 17, 17, 8, 4, False, (4, 1, 1, 17), 17 * 17 * 4 * 5),     # 5, 5, 2 heads
    "one-head-a-chunk-lq<lk": ((3,), 9, 40, 12, 20, True, None, 9 * 40 * 4),
    "causal-lq>lk-empty-rows": ((2,), 12, 5, 8, 4, True, None, None),
    "long-rows-256-threads": ((1,), 6, 1000, 8, 8, False, (6, 1000), None),
    "wide-v-rows-by-dv": ((2,), 5, 3, 4, 200, False, None, None),                      # dscores rows of dv
    "one-row-one-key": ((3,), 1, 1, 32, 32, False, None, None),
    # causal, longer than the matmul tiles: products skip the tiles and k ranges past the diagonal
    "causal-bands-lq<lk": ((2,), 200, 330, 16, 16, True, None, None),
    "causal-bands-lq>lk-mask": ((1, 2), 330, 200, 8, 8, True, (1, 1, 200), None),
    "causal-bands-square-chunks": ((3,), 260, 260, 8, 8, True, None, 260 * 260 * 4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_scores_path_matches_dense_float64(name, calls, monkeypatch):
    batch, lq, lk, d, dv, causal, ms, cap = CASES[name]
    if cap is not None:
        monkeypatch.setattr(attention_scores, "SCORES_BYTES", cap)
    (q, k, v, g), mask = _case(len(name), batch, lq, lk, d, dv, ms)
    got = _run(q, k, v, g, causal, mask)
    heads = int(np.prod(batch)) if batch else 1
    nb = heads if cap is None else cap // (lq * max(lk, d, dv) * 4)
    want_chunks = -(-heads // nb)
    assert calls == [("scores_fwd", want_chunks), ("scores_bwd", want_chunks)]
    want = dense(q, k, v, g, causal, mask, 1.0 / np.sqrt(d))
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        assert x.shape == y.shape, what
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5, err_msg=f"{name}: {what}")


QBLOCKS = {  # batch, lq, lk, d, dv, causal, mask shape, query rows a block (the budget holds that many of one head)
    "causal-blocks-lq=lk": ((2,), 40, 40, 8, 8, True, None, 12),                   # blocks of 12, 12, 12, 4 rows
    "causal-blocks-lq<lk-mask": ((1, 2), 30, 70, 8, 16, True, (1, 2, 30, 70), 8),
    "blocks-lq>lk-key-padding": ((3, 2), 50, 20, 16, 8, False, (3, 1, 1, 20), 16),
    "causal-blocks-past-the-tiles": ((1,), 300, 300, 8, 8, True, None, 130),       # bands inside each block
}


@pytest.mark.parametrize("name", list(QBLOCKS))
def test_the_forced_path_blocks_the_query_rows_of_a_head_over_the_budget(name, calls, monkeypatch):
    """SCELLIS_ATTENTION_PATH=scores with one head's scores over the budget: chunks of whole query rows of one
    head (causal offset and mask rows from the block's first row; dk and dv added up over the blocks)."""
    batch, lq, lk, d, dv, causal, ms, qb = QBLOCKS[name]
    monkeypatch.setenv("SCELLIS_ATTENTION_PATH", "scores")
    monkeypatch.setattr(attention_scores, "SCORES_BYTES", qb * max(lk, d, dv) * 4)
    (q, k, v, g), mask = _case(len(name), batch, lq, lk, d, dv, ms)
    got = _run(q, k, v, g, causal, mask)
    chunks = int(np.prod(batch)) * -(-lq // qb)
    assert calls == [("scores_fwd", chunks), ("scores_bwd", chunks)]
    want = dense(q, k, v, g, causal, mask, 1.0 / np.sqrt(d))
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5, err_msg=f"{name}: {what}")


def test_fully_masked_rows_give_zero_and_neg_inf_lse(calls):
    from scellis_jupyter.graph import functional as F
    (q, k, v, g), _ = _case(3, (2,), 6, 4, 8, 8)
    mask = np.ones((6, 4), bool)
    mask[2] = False
    o, dq, dk, dv = _run(q, k, v, g, False, mask)
    assert [c[0] for c in calls] == ["scores_fwd", "scores_bwd"]
    assert np.all(o[:, 2] == 0) and np.all(dq[:, 2] == 0)
    ts = [sc.tensor(a, device=WG) for a in (q, k, v)]
    node = F.attention(ts[0].node, ts[1].node, ts[2].node, mask=sc.tensor(mask, device=WG).node)
    lse = sc.Tensor(F.item(node.inputs[0], 1), WG).numpy()
    assert np.all(np.isneginf(lse[:, 2])) and np.all(np.isfinite(np.delete(lse, 2, axis=1)))
    for x, y in zip((o, dq, dk, dv), dense(q, k, v, g, False, mask, 1.0 / np.sqrt(8))):
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5)


def test_scores_path_is_deterministic(calls, monkeypatch):
    monkeypatch.setattr(attention_scores, "SCORES_BYTES", 33 * 30 * 4 * 2)
    (q, k, v, g), mask = _case(5, (5,), 33, 30, 16, 16, (5, 1, 30))
    a = _run(q, k, v, g, True, mask)
    b = _run(q, k, v, g, True, mask)
    assert calls[0] == ("scores_fwd", 3)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def test_which_path_runs(calls, monkeypatch):
    """f32 or f16, with or without dropout, up to SCORES_MAX_LK keys takes the scores path; longer keys, a
    head over the chunk budget (or over 1/MEMORY_SHARE of the device's memory), or
    SCELLIS_ATTENTION_PATH=flash take the flash kernels. The same graph
    each time, its recorded program forgotten before each run."""
    (q, k, v, g), _ = _case(4, (2,), 16, 24, 8, 8)

    def took(**kw):
        WG.impl.forget_programs()
        del calls[:]
        _run(q, k, v, g, True, None, **kw)
        return [c[0] for c in calls]
    assert took() == ["scores_fwd", "scores_bwd"]
    if WG.impl.has_f16:
        assert took(dtype="f16") == ["scores_fwd", "scores_bwd"]
    from scellis_jupyter.rng.generator import Generator
    assert took(dropout=0.1, gen=Generator(7).stream("attn")) == ["scores_fwd", "scores_bwd"]
    monkeypatch.setattr(attention_scores, "SCORES_MAX_LK", 23)
    assert took() == []
    monkeypatch.setattr(attention_scores, "SCORES_MAX_LK", 24)
    assert took() == ["scores_fwd", "scores_bwd"]
    monkeypatch.setattr(attention_scores, "SCORES_BYTES", 16 * 24 * 4 - 1)       # one head's scores do not fit
    assert took() == []
    monkeypatch.setattr(attention_scores, "SCORES_BYTES", 16 * 24 * 4)
    assert took() == ["scores_fwd", "scores_bwd"]
    share = attention_scores.MEMORY_SHARE                # a chunk keeps to 1/MEMORY_SHARE of the device's memory
    monkeypatch.setattr(attention_scores, "SCORES_BYTES", 1 << 20)
    monkeypatch.setattr(WG.impl, "memory_bytes", 16 * 24 * 4 * share - 1)
    assert took() == []
    monkeypatch.setattr(WG.impl, "memory_bytes", 16 * 24 * 4 * share)
    assert took() == ["scores_fwd", "scores_bwd"]
    monkeypatch.setenv("SCELLIS_ATTENTION_PATH", "flash")
    assert took() == []
    monkeypatch.setenv("SCELLIS_ATTENTION_PATH", "scores")
    monkeypatch.setattr(attention_scores, "SCORES_MAX_LK", 1)
    assert took() == ["scores_fwd", "scores_bwd"]


def test_a_plans_dry_run_counts_the_score_scratch(calls):
    """The planner's dry run records both score buffers of the backward (2 chunks of 3 heads here)."""
    from scellis_jupyter.graph.autodiff import grad
    from scellis_jupyter.plan.model import _StandIn
    from scellis_jupyter.program import compile_program
    (q, k, v, g), _ = _case(2, (6,), 40, 50, 8, 8)
    ts = [sc.tensor(a, device=WG, requires_grad=True) for a in (q, k, v)]
    o = ops.attention(*ts, causal=True)
    nodes = [o.node] + grad([o.node], [t.node for t in ts], [sc.tensor(g, device=WG).node])
    prog, leaves = compile_program(nodes, WG.impl.name, "debug")
    _, whole = WG.impl.dry_run(prog, [_StandIn(n) for n in leaves])
    assert whole.get("attention-scores") == WG.impl.alloc_bytes(6 * 40 * 50 * 4), whole
    WG.impl.forget_programs()
    attention_scores.SCORES_BYTES, old = 40 * 50 * 4 * 3, attention_scores.SCORES_BYTES
    try:
        _, scratch = WG.impl.dry_run(prog, [_StandIn(n) for n in leaves])
    finally:
        attention_scores.SCORES_BYTES = old
    need = WG.impl.alloc_bytes(3 * 40 * 50 * 4)
    assert scratch.get("attention-scores") == need and scratch.get("attention-dscores") == need, scratch


FUSED = {  # batch, lq, lk, d, dv, causal, score bytes a chunk may take (None: the default), tiles
    "causal-bands-lq<lk": ((2,), 200, 330, 16, 16, True, None, None),
    "causal-lq>lk-empty-rows": ((2,), 150, 40, 8, 4, True, None, None),
    "causal-square-chunks": ((3,), 260, 260, 8, 8, True, 260 * 260 * 4, None),
    "full-wide-v": ((2, 2), 70, 90, 12, 40, False, None, None),
    # S and dP in 32x32 tiles, the products that read them in 128-row tiles: those read score tiles the band
    # skipped (the tuner picked 64-row S tiles and 128-row dv tiles on an H100)
    "causal-small-score-tiles": ((2,), 300, 300, 8, 8, True, None, "mixed"),
    # rows of 332 keys (whole vec4s) whose causal offset 134 puts each band's end inside a vec4 (P v in 128-row
    # tiles: a band end's vec4 reaches past the first row's written P)
    "causal-bands-offset-2-mod-4": ((2,), 198, 332, 16, 16, True, None, "mixed"),
}


@pytest.mark.parametrize("name", list(FUSED))
def test_the_backward_without_a_mask_fuses_probs_and_dscores_into_its_products(name, calls, monkeypatch):
    """Without a mask the backward's S and dP products store P and dS through epilogues (no probs or dscores
    kernel; one delta kernel a chunk). The scratch is filled with NaN before the forward and again before the
    backward: every entry a product reads must have been written, the tiles the causal band skips included
    (within the banded products' reach, BAND_REACH). Against the dense float64 reference, and
    the unfused path (SCELLIS_ATTENTION_FUSE=off, which runs the row kernels) to within float32 rounding."""
    batch, lq, lk, d, dv, causal, cap, tiles = FUSED[name]
    if cap is not None:
        monkeypatch.setattr(attention_scores, "SCORES_BYTES", cap)
    if tiles == "mixed":
        from scellis_jupyter.backends.wgpu.kernels import matmul
        monkeypatch.setattr(matmul, "choose", lambda *a, **kw: ("small", 1) if a[9] else ("tall", 1))  # a[9]: tb
    (q, k, v, g), _ = _case(len(name) + 11, batch, lq, lk, d, dv)
    be = WG.impl

    def poisoned(fn):            # queued before the forward, and again after it
        def run(*a, **kw):
            from scellis_jupyter.backends.storage import Storage
            from scellis_jupyter.backends.wgpu.kernels.elementwise import fill
            n = int(np.prod(batch)) * lq * lk
            for buf in ("attention-scores", "attention-dscores"):
                fill(be, Storage(be, be.scratch(buf, 4 * n), 0, (n,), "f32", 4 * n), float("nan"))
            return fn(*a, **kw)
        return run
    monkeypatch.setattr(attention, "scores_fwd", poisoned(attention.scores_fwd))
    monkeypatch.setattr(attention, "scores_bwd", poisoned(attention.scores_bwd))
    keys = launch_keys(monkeypatch)
    got = _run(q, k, v, g, causal, None)
    sections = [k.split(":")[1] for k in keys if k.startswith("attention_scores:")]
    chunks = calls[1][1]
    assert sections == ["fwd"] * chunks + ["delta"] * chunks, sections
    assert sum(":epi" in k and k.startswith("matmul:") for k in keys) == 2 * chunks
    want = dense(q, k, v, g, causal, None, 1.0 / np.sqrt(d))
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5, err_msg=f"{name}: {what}")
    monkeypatch.setenv("SCELLIS_ATTENTION_FUSE", "off")
    WG.impl.forget_programs()
    del keys[:]
    plain = _run(q, k, v, g, causal, None)
    assert "dscores" in [k.split(":")[1] for k in keys if k.startswith("attention_scores:")]
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, plain):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=f"{name}: {what}, fused vs not")


@pytest.mark.parametrize("name", ["causal-bands-offset-2-mod-4", "causal-small-score-tiles"])
def test_row_major_vec4_loads_keep_the_causal_bands(name, calls, monkeypatch):
    """With SCELLIS_MATMUL_VEC4_AROWS=on the banded products whose A is row-major (P v, dS k: BAND_KEND) load 4
    k of a row at once; a band's end inside a vec4 zeroes the components past it, which the NaN-filled scratch
    past each row's reach would otherwise put into the sums. The whole fused test above, with those loads."""
    monkeypatch.setenv("SCELLIS_MATMUL_VEC4_AROWS", "on")
    keys = launch_keys(monkeypatch)
    test_the_backward_without_a_mask_fuses_probs_and_dscores_into_its_products(name, calls, monkeypatch)
    rows = [k for k in keys if k.startswith("matmul:") and "+va" in k and "+ta" not in k]
    assert any("+band2" in k for k in rows), keys


SPLIT = {  # batch, lq, lk, causal, query rows a block (None: whole heads; 0: all heads in one chunk)
    "causal-one-head-chunks": ((2,), 1100, 1100, True, None),
    "full-one-head-chunks-lq<lk": ((1,), 300, 1200, False, None),
    "causal-query-blocks": ((1,), 2100, 1100, True, 1050),     # dk, dv add up over two split blocks
    "causal-three-heads-a-chunk": ((3,), 1030, 1030, True, 0),  # head by head
}


@pytest.mark.parametrize("name", list(SPLIT))
def test_one_head_chunks_k_split_their_narrow_products(name, calls, monkeypatch):
    """A chunk of one head runs P v, dv, dq and dk K-split (ONE_HEAD_SPLIT: tall_pf tiles, 8 f32 partials
    summed in a fixed order) once K reaches SPLIT_MIN_K (lowered here), and a causal chunk of several heads
    runs them head by head, split; the banded k ranges and the query blocks' accumulation hold across
    splits. Against the dense float64 reference, bit-identical on a rerun."""
    batch, lq, lk, causal, qb = SPLIT[name]
    monkeypatch.setattr(attention_scores, "SPLIT_MIN_K", 1024)
    if qb == 0:
        qb = None
    elif qb is None:
        monkeypatch.setattr(attention_scores, "SCORES_BYTES", lq * lk * 4)
    else:
        monkeypatch.setenv("SCELLIS_ATTENTION_PATH", "scores")
        monkeypatch.setattr(attention_scores, "SCORES_BYTES", qb * lk * 4)
    (q, k, v, g), _ = _case(len(name), batch, lq, lk, 8, 8)
    keys = launch_keys(monkeypatch)
    got = _run(q, k, v, g, causal, None)
    heads, blocks = int(np.prod(batch)), (1 if qb is None else -(-lq // qb))
    products = 2 * (lk >= 1024) + 2 * ((qb or lq) >= 1024)      # P v and dq sum over keys, dv and dk over rows
    assert sum(kk.startswith("matmul:tall_pf:") for kk in keys) == heads * blocks * products, keys
    assert sum(kk.startswith("matmul_ksplit:") for kk in keys) == heads * blocks * products
    want = dense(q, k, v, g, causal, None, 1.0 / np.sqrt(8))
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5, err_msg=f"{name}: {what}")
    again = _run(q, k, v, g, causal, None)
    for x, y in zip(got, again):
        assert np.array_equal(x, y)


F16 = {  # batch, lq, lk, d, dv, causal, mask shape, score bytes a chunk may take (None: the default)
    "causal": ((2, 3), 70, 70, 16, 16, True, None, None),
    "key-padding-chunks": ((3, 2), 20, 33, 8, 12, False, (3, 1, 1, 33), 20 * 33 * 4 * 2),
    "causal-lq<lk": ((2,), 40, 90, 8, 8, True, None, None),
}


@pytest.mark.parametrize("name", list(F16))
def test_f16_inputs_take_the_score_path_in_f32(name, calls, monkeypatch):
    """f16 q, k, v (and dout) run the score path on f32 copies and round out, dq, dk, dv once: against the dense
    float64 reference of the f16 inputs within f16 rounding (rtol 4e-3, atol 2e-3: the f32 path's error is far
    below one f16 ulp), and against the flash kernels' f16 results within twice that."""
    if not WG.impl.has_f16:
        pytest.skip("the adapter has no shader-f16")
    batch, lq, lk, d, dv, causal, ms, cap = F16[name]
    if cap is not None:
        monkeypatch.setattr(attention_scores, "SCORES_BYTES", cap)
    (q, k, v, g), mask = _case(len(name) + 5, batch, lq, lk, d, dv, ms)
    q, k, v, g = (a.astype(np.float16) for a in (q, k, v, g))
    got = _run(q, k, v, g, causal, mask, dtype="f16")
    assert [c[0] for c in calls] == ["scores_fwd", "scores_bwd"]
    want = dense(*(a.astype(np.float32) for a in (q, k, v, g)), causal, mask, 1.0 / np.sqrt(d))
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        assert x.dtype == np.float16, what
        np.testing.assert_allclose(x.astype(np.float64), y, rtol=4e-3, atol=2e-3, err_msg=f"{name}: {what}")
    monkeypatch.setenv("SCELLIS_ATTENTION_PATH", "flash")
    WG.impl.forget_programs()
    flash = _run(q, k, v, g, causal, mask, dtype="f16")
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, flash):
        np.testing.assert_allclose(x.astype(np.float64), y.astype(np.float64), rtol=8e-3, atol=4e-3,
                                   err_msg=f"{name}: {what} against flash")


# ---- dropout ------------------------------------------------------------------------------------------
DROPOUT = {  # batch, lq, lk, d, causal, mask shape, stream offset, based, chunk budget / query block, f16
    # without a mask the backward draws in the S product's epilogue and reads the sign in dP's
    "fused-causal": ((2, 2), 70, 53, 16, True, None, 6, False, None, False),
    "fused-bands-odd-offset-based": ((2,), 200, 330, 16, True, None, 7, True, None, False),
    "fused-full-chunks": ((3, 2), 33, 41, 8, False, None, 1, False, 33 * 41 * 4 * 2, False),
    # with a mask the row kernels do it (probs draws, dscores reads)
    "masked-based": ((2, 2), 70, 53, 16, True, (70, 53), 2 ** 32 - 3, True, None, False),
    "key-padding-query-blocks": ((2,), 50, 30, 8, False, (2, 1, 30), 5, True, ("rows", 16), False),
    "causal-query-blocks": ((1,), 40, 40, 8, True, None, 3, False, ("rows", 12), False),
    "f16-causal": ((2, 2), 40, 45, 16, True, None, 9, True, None, True),
}


def _run_drop(name, monkeypatch, keys=None):
    """(results, the dense float64 reference with the numpy-Philox mask, tolerances) of case `name`."""
    from scellis_jupyter.rng.generator import Generator, Stream, base_words
    batch, lq, lk, d, causal, ms, off, based, cap, f16 = DROPOUT[name]
    if isinstance(cap, tuple):                # forced path, blocks of query rows of one head
        monkeypatch.setenv("SCELLIS_ATTENTION_PATH", "scores")
        monkeypatch.setattr(attention_scores, "SCORES_BYTES", cap[1] * lk * 4)
    elif cap is not None:
        monkeypatch.setattr(attention_scores, "SCORES_BYTES", cap)
    (q, k, v, g), mask = _case(len(name) + 40, batch, lq, lk, d, d, ms)
    dtype = "f16" if f16 else "f32"
    if f16:
        q, k, v, g = (a.astype(np.float16) for a in (q, k, v, g))
    p, gen = 0.3, Generator(17)
    gen.positions["attn"] = off
    pos = 2 ** 32 + 5 if based else 0
    stream = Stream(gen, "attn", base=sc.tensor(base_words(pos), device=WG).node) if based else gen.stream("attn")
    got = _run(q, k, v, g, causal, mask, dtype=dtype, dropout=p, gen=stream)
    z = philox_keep(stream.key, off + pos, int(np.prod(batch)), lq, lk, p).reshape(batch + (lq, lk))
    want = dense(*(a.astype(np.float32) for a in (q, k, v, g)), causal, mask, 1.0 / np.sqrt(d), z)
    return got, want, ((4e-3, 2e-3) if f16 else (2e-4, 2e-5))


@pytest.mark.parametrize("name", list(DROPOUT))
def test_dropout_on_the_score_path_matches_dense_with_the_philox_mask(name, calls, monkeypatch, mul64):
    """Attention dropout on the score path: forward and every gradient against float64 with the keep factors
    drawn by the project's numpy Philox (word offset + (head * Lq + i) * Lk + j; step-base: the stream position
    a device input past 2^32). The forward's row kernel draws them, and the backward draws them again while
    recomputing P (in the S product's epilogue without a mask, the probs kernel with one): it can only match
    if both draw the forward's mask, over chunks of heads and blocks of query rows alike. Keeps P's keep bit
    in its sign until dS, so the sign's decoding is checked too (a dropped entry still enters dS)."""
    keys = launch_keys(monkeypatch)
    got, want, (rtol, atol) = _run_drop(name, monkeypatch)
    assert [c[0] for c in calls] == ["scores_fwd", "scores_bwd"]
    sections = {k.split(":")[1] for k in keys if k.startswith("attention_scores:") and ":drop=True" in k}
    fused = DROPOUT[name][5] is None
    assert sections == ({"fwd"} if fused else {"fwd", "probs", "dscores"}), sections
    assert sum(":epi" in k and k.startswith("matmul:") for k in keys) == (2 * calls[1][1] if fused else 0)
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(x.astype(np.float64), y, rtol=rtol, atol=atol, err_msg=f"{name}: {what}")


def test_dropout_fused_and_row_kernels_agree(calls, monkeypatch):
    """The fused backward (epilogues) and the row kernels (SCELLIS_ATTENTION_FUSE=off) on one dropout case:
    the same values to float32 rounding, each within the dense reference."""
    got, want, _ = _run_drop("fused-bands-odd-offset-based", monkeypatch)
    monkeypatch.setenv("SCELLIS_ATTENTION_FUSE", "off")
    WG.impl.forget_programs()
    keys = launch_keys(monkeypatch)
    plain, _, _ = _run_drop("fused-bands-odd-offset-based", monkeypatch)
    assert not any(":epi" in k for k in keys if k.startswith("matmul:"))
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, plain):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=f"{what}, fused vs not")


def test_the_score_path_and_flash_kernels_draw_one_mask(calls, monkeypatch):
    """q = k = 0 makes every probability 1/Lk and v = I puts pair (i, j)'s keep factor into out[i, j] * Lk: the
    score path's mask is the flash kernels' mask exactly, and dv (dout = 1) the column sums of it on both."""
    from scellis_jupyter.rng.generator import Generator
    nh, lq, lk, p = 3, 40, 36, 0.4
    q = np.zeros((nh, lq, 64), np.float32)
    k = np.zeros((nh, lk, 64), np.float32)
    v = np.broadcast_to(np.eye(lk, 64, dtype=np.float32), (nh, lk, 64)).copy()
    g = np.ones((nh, lq, 64), np.float32)

    def masks():
        gen = Generator(5)
        gen.positions["attn"] = 3
        out, _, _, dv = _run(q, k, v, g, False, None, dropout=p, gen=gen.stream("attn"))
        return out * lk, dv
    z, dv = masks()
    assert [c[0] for c in calls] == ["scores_fwd", "scores_bwd"]
    monkeypatch.setenv("SCELLIS_ATTENTION_PATH", "flash")
    WG.impl.forget_programs()
    zf, dvf = masks()
    assert len(calls) == 2                      # the flash kernels ran this time
    np.testing.assert_array_equal(z[..., :lk] != 0, zf[..., :lk] != 0)
    np.testing.assert_array_equal(z[..., :lk] != 0, philox_keep(Generator(5).stream("attn").key, 3, nh, lq, lk, p) != 0)
    np.testing.assert_allclose(dv[:, :, 0], z.sum(axis=1)[:, :lk] / lk, rtol=1e-5)
    np.testing.assert_allclose(dv, dvf, rtol=1e-5, atol=1e-6)
