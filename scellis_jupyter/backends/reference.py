"""The numpy reference backend: the deterministic oracle every WGSL kernel is checked against.

Why an arena here too: the reference path allocates exactly like wgpu does (one arena, planned
offsets), so plans and measured peaks mean the same thing on both. It is never chosen silently.
"""
from __future__ import annotations

from scipy.special import erf as _erf            # exact erf, vectorized
from types import SimpleNamespace
import functools
import math
import weakref

import numpy as np

from .. import dtypes as dt
from ..errors import KernelError
from .storage import Storage
from .blas import pin_one_thread
from ..rng.philox import stream_bits
from ..rng.philox import bits_to_uniform
from ..graph.opset import conv_out
from ..graph.opset import NF4_TABLE
from ..program.schedule import multi_offset



def _np(dtype):
    return dt.to_numpy(dtype)


class ReferenceBackend:
    name = "reference"

    def __init__(self):
        pin_one_thread()                 # the same bits in every process (backends/blas.py says why)
        self._arena = np.zeros(0, np.uint8)
        self.allocated = 0
        self.peak = 0
        self.limits = {"max-storage-buffer-binding-size": 1 << 62, "max-buffer-size": 1 << 62}
        self.features = set()
        self.replay = True              # run_steps: a Program's steps compiled once (False: op by op)
        self._replays: dict[int, tuple] = {}     # id(prog) -> (prog, generated function, arena, windows, ...)
        self._seen: dict[int, tuple] = {}        # id(prog) -> (prog, runs so far) before it is compiled
        self._arena_views: dict[tuple, np.ndarray] = {}

    # ---- memory -------------------------------------------------------------------------------------
    def _track(self, n: int) -> None:
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    @staticmethod
    def alloc_bytes(nbytes: int) -> int:
        """Bytes one allocation for `nbytes` takes (the planner counts with the same rule)."""
        return max(nbytes, 1)

    @staticmethod
    def arena_bytes(nbytes: int) -> int:
        return nbytes

    @staticmethod
    def staging_bytes(nbytes_list) -> int:
        """Readback copies are host arrays handed to the caller, not engine allocations."""
        return 0

    pools_outputs = False           # an output's buffer is freed when nothing refers to it

    def host_temporaries_bound(self, prog) -> int:
        """Host bytes a run of `prog` may hold beyond its planned allocations: numpy's temporaries inside
        the worst kernel (a multiple of its operand and result bytes, by kernel family, plus a fixed
        Python overhead) and the bookkeeping of every value's window. A bound, not a plan: the kernels
        free these before they return, and tests check it against tracemalloc."""
        worst = 0
        for s in prog.steps:
            v = prog.values[s]
            io = v.nbytes + sum(prog.values[i].nbytes for i in v.inputs)
            k = len(v.attrs.get("code", ())) * 2 + 2 if v.op in ("fused", "matmul_fused") else TEMP_FACTOR.get(v.op, 3)
            worst = max(worst, KERNEL_OVERHEAD + k * io)
        return worst + VALUE_OVERHEAD * len(prog.values)

    def arena(self, nbytes: int):
        if self._arena.nbytes < nbytes:
            self._track(nbytes - self._arena.nbytes)
            self._arena = np.zeros(nbytes, np.uint8)
            self._arena_views.clear()
            self._replays.clear()
        return self._arena

    def alloc_storage(self, shape, dtype, nbytes: int) -> Storage:
        buf = np.zeros(self.alloc_bytes(nbytes), np.uint8)
        self._track(buf.nbytes)
        weakref.finalize(buf, self._untrack, buf.nbytes)   # freed when nothing refers to it (as on wgpu)
        return Storage(self, buf, 0, tuple(shape), dtype, nbytes)

    def _untrack(self, n: int) -> None:
        self.allocated -= n

    def from_numpy_many(self, items) -> list:
        """Several uploads (each its own array here; the wgpu backend packs some into shared buffers)."""
        return [self.from_numpy(a, d) for a, d in items]

    def from_numpy(self, arr: np.ndarray, dtype: str) -> Storage:
        # not np.ascontiguousarray: it makes a 0-d array 1-d, and the storage must keep the value's shape
        # (a compiled replay writes into windows of exactly that shape); write() copies any memory layout
        arr = np.asarray(arr)
        s = self.alloc_storage(arr.shape, dtype, dt.nbytes(arr.shape, dtype))
        self.write(s, arr)
        return s

    def _raw(self, s: Storage) -> np.ndarray:
        """The numpy window of `s`, made once per storage (and once per arena slot): windows are cheap to
        keep (the storage holds the buffer anyway) and costly to remake every dispatch of a small step."""
        got = s.__dict__.get("_window")
        if got is not None:
            return got
        arena = s.buffer is self._arena
        if arena:
            got = self._arena_views.get((s.offset, s.shape, s.dtype))
        if got is None:
            store = np.uint32 if s.dtype == "bool" else _np(s.dtype)
            n = math.prod(s.shape) if s.shape else 1
            got = np.frombuffer(s.buffer, dtype=store, count=n, offset=s.offset).reshape(s.shape)
            if arena:
                self._arena_views[(s.offset, s.shape, s.dtype)] = got
        s._window = got
        return got

    def write(self, s: Storage, arr: np.ndarray) -> None:
        raw = self._raw(s)
        arr = np.asarray(arr).reshape(s.shape)
        raw[...] = arr.astype(raw.dtype, copy=False) if s.dtype != "bool" else (arr != 0)

    def read(self, s: Storage) -> np.ndarray:
        raw = self._raw(s)
        return raw != 0 if s.dtype == "bool" else raw

    def to_numpy(self, s: Storage) -> np.ndarray:
        return np.array(self.read(s), copy=True)

    def read_many(self, storages) -> list[np.ndarray]:
        return [self.to_numpy(s) for s in storages]

    # ---- execution ----------------------------------------------------------------------------------
    def begin(self, prog, roots=None) -> bool:
        return False

    def end(self, prog) -> None:
        pass

    def dispatch(self, value, ins: list[Storage], out: Storage, prog) -> None:
        fn = KERNELS.get(value.op)
        if fn is None:
            raise KernelError(f"no reference kernel for op {value.op!r}", where="device reference")
        args = [self.read(s) for s in ins]
        with np.errstate(all="ignore"):     # inf/NaN are values here (IEEE, as on a GPU), not events
            res = fn(value, *args, prog=prog)
        if isinstance(out.dtype, tuple):
            for i, r in enumerate(res):
                part = out.sub(multi_offset(out.shape, out.dtype, i), out.shape[i], out.dtype[i], 0)
                self.write(part, np.asarray(r))
        else:
            self.write(out, np.asarray(res).reshape(out.shape))

    def run_steps(self, prog, resolve) -> bool:
        """Run every step of `prog` from its compiled form (False: not taken, dispatch op by op).

        Why: a small model's step is ~50 dispatches of arrays of a few hundred elements, where the Python
        around each numpy call (kernel lookup, windows, error state, fused-op records) cost more than the
        arithmetic. The compiled form calls the very same numpy functions in the same order on the same
        windows, so results are bit-identical to `dispatch`; it only hoists what does not change between
        runs (kernel choice, fused-op records, constants, arena windows) out of the step."""
        if not self.replay:
            return False
        got = self._replays.get(id(prog))
        if got is None or got[0] is not prog or got[2] is not self._arena:
            # compiled from its third run on: a program run once or twice (an eager op, a measured step)
            # is not worth the compile, and its host peak stays the op-by-op one the plan bounds
            seen = self._seen.get(id(prog))
            n = seen[1] + 1 if seen is not None and seen[0] is prog else 1
            if n <= REPLAY_AFTER:
                if len(self._seen) >= 256:
                    self._seen.clear()
                self._seen[id(prog)] = (prog, n)
                return False
            self._seen.pop(id(prog), None)
            if len(self._replays) >= 64:
                self._replays.clear()
            got = self._replays[id(prog)] = self._compile(prog, resolve)
        _, fn, _, slots, dynamic = got
        arrs = list(slots)
        for slot, i in dynamic:           # leaves, persistent and donated storages: this run's own
            arrs[slot] = self._raw(resolve(i))
        with np.errstate(all="ignore"):     # inf/NaN are values here (IEEE, as on a GPU), not events
            fn(arrs, resolve, prog, self)
        return True

    def _compile(self, prog, resolve) -> tuple:
        """The step list as one generated function of the values' windows (`arrs`, by slot): per step the
        kernel call `dispatch` makes, then the store of its result, shaped and cast as `write` does."""
        index: dict[int, int] = {}
        slots: list = []
        dynamic: list = []

        def slot(i: int) -> str:
            if i not in index:
                s = resolve(i)
                index[i] = len(slots)
                if s.buffer is self._arena:        # at a planned arena offset: the same window every run
                    slots.append(self._raw(s))
                else:
                    slots.append(None)
                    dynamic.append((index[i], i))
            return f"s{index[i]}"

        ns: dict = {"_asarray": np.asarray}
        lines = []
        truth: dict[int, str] = {}      # a bool value's `!= 0` view of its u32 window, made at its first read

        def arg(i: int) -> str:
            if prog.values[i].dtype != "bool":
                return slot(i)
            if i not in truth:
                truth[i] = f"b{len(truth)}"
                lines.append(f"{truth[i]} = {slot(i)} != 0")
            return truth[i]
        for step in prog.steps:
            v = prog.values[step]
            fn = KERNELS.get(v.op)
            if fn is None:
                raise KernelError(f"no reference kernel for op {v.op!r}", where="device reference")
            ns[f"v{step}"] = v
            if isinstance(v.dtype, tuple):          # several outputs: the general path
                lines.append(f"_self.dispatch(v{step}, [resolve(i) for i in v{step}.inputs], resolve({step}), prog)")
                continue
            args = [arg(i) for i in v.inputs]
            out = slot(step)
            direct = None
            if v.op == "fused":
                fn = _compiled_fused(v, prog)
            elif v.op == "matmul_fused":
                fn = _compiled_matmul_fused(v, prog)
            elif v.dtype != "f16":
                kin = prog.values[v.inputs[0]].dtype if v.inputs else None
                if v.op in _UNARY:
                    direct = _UNARY[v.op]
                elif v.op in _BINARY and kin not in ("f16", None) and not (
                        _BINARY[v.op] is np.divide and kin != "bool" and _np(kin)().dtype.kind in "iu"):
                    direct = _BINARY[v.op]
                else:
                    fn = _QUIET.get(v.op, fn)
            if direct is not None:
                ns[f"f{step}"] = direct
                shapes = [tuple(prog.values[i].shape) for i in v.inputs]
                same = np.broadcast_shapes(*shapes) == tuple(v.shape)
                if same and v.dtype != "bool" and _ufunc_dtype(direct, [prog.values[i].dtype for i in v.inputs]) \
                        == np.dtype(_np(v.dtype)):      # straight into the output (numpy handles overlap)
                    lines.append(f"f{step}({', '.join(args)}, out={out})")
                    continue
                lines.append(f"r = f{step}({', '.join(args)})")
                known = v.shape != () and same
            else:
                ns[f"f{step}"] = fn
                lines.append(f"r = f{step}(v{step}, {''.join(a + ', ' for a in args)}prog=prog)")
                known = False
            if not known:
                ns[f"h{step}"] = tuple(v.shape)
                lines.append(f"r = _asarray(r).reshape(h{step})")
            if v.dtype == "bool":
                lines.append(f"{out}[...] = r != 0")
            else:
                ns[f"d{step}"] = _np(v.dtype)
                lines.append(f"{out}[...] = r.astype(d{step}, copy=False)")
        unpack = "".join(f"s{j}, " for j in range(len(slots)))
        src = "def run(arrs, resolve, prog, _self):\n    " + (f"{unpack} = arrs\n    " if slots else "") + \
            "\n    ".join(lines or ["pass"]) + "\n"
        exec(compile(src, f"<reference program {prog.hash[:12]}>", "exec"), ns)
        return prog, ns["run"], self._arena, slots, dynamic


# numpy temporaries per kernel family, as a multiple of its operand + result bytes (f64 detours, random
# bits before their floats, attention's score blocks); the rest take at most 3x
TEMP_FACTOR = {"gelu": 6, "gelu_grad": 6, "erf": 6, "sigmoid": 6, "philox_bits": 12, "philox_uniform": 12,
               "attention": 6, "attention_bwd": 6, "fold": 3, "unfold": 3, "scatter_add": 3}
KERNEL_OVERHEAD = 4096      # Python objects of one dispatch (views, attribute dicts)
VALUE_OVERHEAD = 512        # one value's Storage window while a Program runs

# ---- kernels: (value, *arrays, prog) -> array ---------------------------------------------------------
KERNELS: dict = {}


def k(*names):
    def deco(fn):
        for n in names:
            KERNELS[n] = fn
        return fn
    return deco


def _ct(v):
    """Compute type: f16 computes in f32 and rounds once on store (like the f16 GPU path's accumulate)."""
    d = v.dtype
    return np.float32 if d == "f16" else _np(d) if d in dt.FLOATS else None


def _gelu(x):
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + _erf(x64 / math.sqrt(2.0)))).astype(x.dtype)


def _gelu_grad(x):
    x64 = x.astype(np.float64)
    cdf = 0.5 * (1.0 + _erf(x64 / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)
    return (cdf + x64 * pdf).astype(x.dtype)


_UNARY = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "tanh": np.tanh,
    "sigmoid": lambda x: (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)
    if x.dtype != np.float64 else 1.0 / (1.0 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, x.dtype.type(0)), "gelu": _gelu, "gelu_grad": _gelu_grad,
    "sqrt": np.sqrt, "rsqrt": lambda x: x.dtype.type(1) / np.sqrt(x), "abs": np.abs, "sign": np.sign,
    "sin": np.sin, "cos": np.cos, "reciprocal": lambda x: x.dtype.type(1) / x,
    "erf": lambda x: _erf(x.astype(np.float64)).astype(x.dtype),
}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
           "maximum": np.maximum, "minimum": np.minimum, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal}


def _with_ct(v, fn, *xs):
    ct = _ct(v) if v.dtype != "bool" else None
    if ct is not None and v.dtype == "f16":
        xs = [x.astype(np.float32) for x in xs]
    with np.errstate(all="ignore"):
        return fn(*xs)


for _n, _f in _UNARY.items():
    k(_n)(lambda v, x, prog, _f=_f: _with_ct(v, _f, x))
for _n, _f in _BINARY.items():
    def _bin(v, a, b, prog, _f=_f):
        if a.dtype == np.float16:
            a, b = a.astype(np.float32), b.astype(np.float32)
        with np.errstate(all="ignore"):
            if _f is np.divide and a.dtype.kind in "iu":
                return np.floor_divide(a, np.where(b == 0, 1, b))
            return _f(a, b)
    k(_n)(_bin)

# The same kernels for a caller that already holds np.errstate(all="ignore") (run_steps), for values whose
# dtype is not f16 (f16 casts first): the very same numpy calls, without entering the error state per op.
_QUIET: dict = {n: (lambda v, x, prog, _f=_f: _f(x)) for n, _f in _UNARY.items()}
for _n, _f in _BINARY.items():
    def _bin_quiet(v, a, b, prog, _f=_f):
        if a.dtype == np.float16:
            a, b = a.astype(np.float32), b.astype(np.float32)
        if _f is np.divide and a.dtype.kind in "iu":
            return np.floor_divide(a, np.where(b == 0, 1, b))
        return _f(a, b)
    _QUIET[_n] = _bin_quiet


@k("isfinite")
def _isfinite(v, x, prog):
    return np.isfinite(x)


@k("where")
def _where(v, c, a, b, prog):
    return np.where(c, a, b)


@k("cast")
def _cast(v, x, prog):
    to = v.attrs["dtype"]
    if to in ("i8", "i32", "u32") and x.dtype.kind == "f":
        info = np.iinfo(_np(to))
        with np.errstate(invalid="ignore"):  # clip in f64: int32's max is not representable in f32/f16
            x = np.clip(np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0), info.min, info.max)
    if to == "bool":
        return x != 0
    return x.astype(_np(to))


@k("fill")
def _fill(v, prog):
    return np.full(v.shape, v.attrs["value"], dtype=np.uint32 if v.dtype == "bool" else _np(v.dtype))


@k("fused")
def _fused(v, *args, prog):
    """Run a fused elementwise group op by op, rounding each result to its dtype as a store would."""
    temps = []
    for op, attrs, refs, shape, dtype in v.attrs["code"]:
        xs = [args[j] if kind == "in" else temps[j] for kind, j in refs]
        r = np.asarray(KERNELS[op](SimpleNamespace(op=op, attrs=dict(attrs), shape=shape, dtype=dtype), *xs,
                                   prog=prog)).reshape(shape)
        temps.append(r != 0 if dtype == "bool" else r.astype(_np(dtype), copy=False))
    return temps[-1]


@k("matmul_fused")
def _matmul_fused(v, a, b, *others, prog):
    """A matmul with its epilogue (program/epilogue.py), as the unfused steps would run: the product
    rounded to the matmul's dtype and shaped as the chain reads it, then the chain op by op."""
    (mshape, mdtype), slot = v.attrs["mm"], v.attrs["slot"]
    ta, tb = v.attrs.get("trans", (False, False))
    mm = SimpleNamespace(op="matmul", attrs={"trans_a": ta, "trans_b": tb}, shape=mshape, dtype=mdtype)
    r = np.asarray(KERNELS["matmul"](mm, a, b, prog=prog)).astype(_np(mdtype), copy=False)
    args = list(others)
    args.insert(slot, r.reshape(v.attrs["seen"]))
    return _fused(v, *args, prog=prog)


def _ufunc_dtype(fn, dtypes):
    """The dtype numpy's ufunc `fn` returns for arrays of these dtypes (None: not a ufunc, or unknown)."""
    if not isinstance(fn, np.ufunc) or None in dtypes:
        return None
    try:
        return fn.resolve_dtypes(tuple(np.dtype(bool) if d == "bool" else np.dtype(_np(d)) for d in dtypes) + (None,))[-1]
    except (TypeError, ValueError, np.exceptions.DTypePromotionError):
        return None


REPLAY_AFTER = 2           # runs of a Program op by op before run_steps compiles it
FILL_CONSTANT_MAX = 1024     # a fused group's fills up to this many elements are made once, not every run


def _compiled_matmul_fused(v, prog):
    """`_matmul_fused` with its chain compiled (`_compiled_fused`): the product as `_matmul_fused` makes it
    (rounded to the matmul's dtype, shaped as the chain reads it), then the same numpy calls as `_fused`."""
    (mshape, mdtype), slot, seen = v.attrs["mm"], v.attrs["slot"], tuple(v.attrs["seen"])
    ta, tb = v.attrs.get("trans", (False, False))
    mm = SimpleNamespace(op="matmul", attrs={"trans_a": ta, "trans_b": tb}, shape=mshape, dtype=mdtype)
    others = list(v.inputs[2:])
    dtypes = [prog.values[i].dtype for i in others]
    shapes = [tuple(prog.values[i].shape) for i in others]
    dtypes.insert(slot, mdtype)
    shapes.insert(slot, seen)
    chain = _compiled_fused(v, prog, dtypes, shapes)
    matmul, npd = KERNELS["matmul"], _np(mdtype)

    def run(v, a, b, *rest, prog):
        args = list(rest)
        args.insert(slot, np.asarray(matmul(mm, a, b, prog=prog)).astype(npd, copy=False).reshape(seen))
        return chain(v, *args, prog=prog)
    return run


def _compiled_fused(v, prog, dtypes: list | None = None, in_shape: list | None = None):
    """`_fused` for one value as one generated Python function: the same numpy calls in the same order,
    with the interpretation (op records, kernel lookups, argument lists) and small constants done once.

    Why generated: a fused Adam update is a dozen ufuncs on a few hundred elements, where walking the op
    records cost several times the arithmetic. Elementwise ops whose operand dtypes are known call their
    numpy function directly (run_steps holds the error state `_with_ct`/`_bin` would enter); everything
    else calls its kernel as `_fused` does. Kernels never write their inputs, so a constant is safely
    shared between runs; every result is shaped and cast exactly as `_fused` does. `dtypes` / `in_shape`:
    the chain's inputs where they are not v's (a matmul epilogue's: the product among them)."""
    code = v.attrs["code"]
    if dtypes is None:
        dtypes = [prog.values[i].dtype for i in v.inputs]
        in_shape = [tuple(prog.values[i].shape) for i in v.inputs]  # the windows run_steps passes are shaped so
    ns: dict = {"_asarray": np.asarray}
    lines, shapes = [], []
    for t, (op, attrs, refs, shape, dtype) in enumerate(code):
        names = [f"a{j}" if kind == "in" else f"t{j}" for kind, j in refs]
        kinds = [dtypes[j] if kind == "in" else code[j][4] for kind, j in refs]
        in_shapes = [in_shape[j] if kind == "in" else shapes[j] for kind, j in refs]
        shapes.append(tuple(shape))
        npd = None if dtype == "bool" else _np(dtype)
        node = SimpleNamespace(op=op, attrs=dict(attrs), shape=shape, dtype=dtype)
        if op == "fill" and math.prod(shape) <= FILL_CONSTANT_MAX:
            r = np.asarray(KERNELS[op](node, prog=prog)).reshape(shape)
            ns[f"c{t}"] = r != 0 if npd is None else r.astype(npd, copy=False)
            lines.append(f"t{t} = c{t}")
            continue
        direct = None
        if op in _UNARY and dtype != "f16":
            direct = _UNARY[op]
        elif op in _BINARY and kinds[0] is not None and kinds[0] != "f16" and not (
                _BINARY[op] is np.divide and kinds[0] != "bool" and _np(kinds[0])().dtype.kind in "iu"):
            direct = _BINARY[op]
        if direct is not None:
            ns[f"f{t}"] = direct
            lines.append(f"t{t} = f{t}({', '.join(names)})")
        else:
            ns[f"k{t}"], ns[f"n{t}"] = KERNELS[op], node
            lines.append(f"t{t} = k{t}(n{t}, {''.join(n + ', ' for n in names)}prog=prog)")
        known = direct is not None and shape != () and None not in in_shapes and \
            np.broadcast_shapes(*in_shapes) == tuple(shape)
        if not known:
            ns[f"s{t}"] = tuple(shape)
            lines.append(f"t{t} = _asarray(t{t}).reshape(s{t})")
        if npd is None:
            lines.append(f"t{t} = t{t} != 0")
        elif not (known and _ufunc_dtype(direct, kinds) == np.dtype(npd)):     # else: already that dtype
            ns[f"d{t}"] = npd
            lines.append(f"t{t} = t{t}.astype(d{t}, copy=False)")
    args = "".join(f"a{j}, " for j in range(len(dtypes)))
    src = f"def run(v, {args}prog):\n    " + "\n    ".join(lines) + f"\n    return t{len(code) - 1}\n"
    exec(compile(src, f"<fused {len(code)} ops>", "exec"), ns)
    return ns["run"]


@k("iota")
def _iota(v, prog):
    return np.arange(v.attrs["n"]).astype(_np(v.dtype))


def _philox_offset(v, base) -> int:
    """attrs offset, plus the step's stream position when the op has a base input (u32 [lo, hi])."""
    off = int(v.attrs["offset"])
    if base is not None:
        b = np.asarray(base).astype(np.uint64).reshape(-1)
        off += int(b[0]) + (int(b[1]) << 32)
    return off


@k("philox_bits")
def _bits(v, *base, prog):
    n = int(np.prod(v.shape, dtype=np.int64))
    return stream_bits(v.attrs["key"], _philox_offset(v, base[0] if base else None), n).reshape(v.shape)


@k("philox_uniform")
def _uniform(v, *base, prog):
    n = int(np.prod(v.shape, dtype=np.int64))
    off = _philox_offset(v, base[0] if base else None)
    return bits_to_uniform(stream_bits(v.attrs["key"], off, n)).reshape(v.shape)


def _acc(x):
    return x.astype(np.float32) if x.dtype == np.float16 else x


@k("reduce_sum")
def _rsum(v, x, prog):
    # np.add.reduce is what np.sum calls for an ndarray (the same pairwise sum), without its Python wrapper
    return np.add.reduce(_acc(x), axis=v.attrs["axes"], keepdims=v.attrs.get("keepdims", False))


@k("reduce_max")
def _rmax(v, x, prog):
    return np.max(x, axis=v.attrs["axes"], keepdims=v.attrs.get("keepdims", False))


def _trans(x, flag):
    """A folded transpose read as the permute it replaces would have stored it (a contiguous copy), so
    matmul(trans_a=True) calls numpy with the very arrays matmul(permute(x)) does: the same bits."""
    return np.ascontiguousarray(np.swapaxes(x, -1, -2)) if flag else x


@k("matmul")
def _matmul(v, a, b, prog):
    at = v.attrs.get
    return np.matmul(_acc(_trans(a, at("trans_a", False))), _acc(_trans(b, at("trans_b", False))))


@k("permute")
def _permute(v, x, prog):
    return np.transpose(x, v.attrs["perm"])


@k("expand")
def _expand(v, x, prog):
    return np.broadcast_to(x, v.shape)


def _slices(attrs, shape_in):
    return tuple(slice(a, b, s) for a, b, s in zip(attrs["starts"], attrs["stops"], attrs["steps"]))


@k("slice")
def _slice(v, x, prog):
    return x[_slices(v.attrs, x.shape)]


@k("unslice")
def _unslice(v, x, prog):
    out = np.zeros(v.shape, dtype=x.dtype)
    sl = tuple(slice(a, a + s * st, st) for a, s, st in zip(v.attrs["starts"], x.shape, v.attrs["steps"]))
    out[sl] = x
    return out


@k("sum_many")
def _sum_many(v, *xs, prog):
    """In the inputs' order, each input's sum in its compute type added to the running total: the bits of
    the chain reduce_sum(x) (of mul(x, x)) + ... it stands for."""
    total = None
    for x in xs:
        a = _acc(x)
        s = np.add.reduce(a * a if v.attrs["square"] else a, axis=None)      # np.sum's own reduction
        total = s if total is None else total + s
    return np.asarray(total).astype(xs[0].dtype)


@k("concat")
def _concat(v, *xs, prog):
    return np.concatenate(xs, axis=v.attrs["axis"])


def _check_index(op, idx, x, ax):
    size = x.shape[ax]
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        bad = idx[(idx < 0) | (idx >= size)].flat[0]
        raise KernelError(f"index {int(bad)} is out of range for axis {ax} of size {size} (input "
                          f"{tuple(x.shape)}, index {tuple(idx.shape)})", where=f"op '{op}'")


@functools.lru_cache(maxsize=256)
def _along(shape: tuple) -> list:
    """The open-grid index arrays of `shape` (np.indices(shape, sparse=True)), made once per shape: the
    coordinates gather / scatter_add pair with idx[i] on every axis but their own (read-only)."""
    grid = list(np.indices(shape, sparse=True))
    for g in grid:
        g.flags.writeable = False
    return grid


def _along_index(idx, ax: int) -> tuple:
    full = list(_along(tuple(idx.shape)))
    full[ax] = idx
    return tuple(full)


@k("gather")
def _gather(v, x, idx, prog):
    """out[i] = x[i with its `ax` coordinate replaced by idx[i]] (np.take_along_axis over x cut to idx's
    extent on the other axes), as one fancy index over index grids made once per shape."""
    ax = v.attrs["axis"]
    _check_index("gather", idx, x, ax)
    return x[_along_index(idx, ax)]


@k("scatter_add")
def _scatter_add(v, base, idx, src, prog):
    ax = v.attrs["axis"]
    _check_index("scatter_add", idx, base, ax)
    out = base.astype(base.dtype, copy=True)
    np.add.at(out, _along_index(idx, ax), src)
    return out


@k("softmax")
def _softmax(v, x, prog):
    ax = v.attrs["axis"]
    x = _acc(x)
    if x.size == 0:
        return x
    m = np.max(x, axis=ax, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=ax, keepdims=True)


@k("log_softmax")
def _log_softmax(v, x, prog):
    ax = v.attrs["axis"]
    x = _acc(x)
    if x.size == 0:
        return x
    m = np.max(x, axis=ax, keepdims=True)
    xm = x - m                          # (x - m) - log(...) evaluates as before, x - m made once
    return xm - np.log(np.add.reduce(np.exp(xm), axis=ax, keepdims=True))


@k("layer_norm", "rms_norm")
def _norm(v, x, *affine, prog):
    """In x's compute type (f16 in f32, rounded once on store), the composite's formula."""
    a = v.attrs
    xa = _acc(x)
    axes = tuple(range(x.ndim - int(a["n_axes"]), x.ndim))
    eps = xa.dtype.type(a["eps"])
    if v.op == "layer_norm":
        d = xa - xa.mean(axis=axes, keepdims=True)
        y = d * (xa.dtype.type(1) / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps))
    else:
        y = xa * (xa.dtype.type(1) / np.sqrt((xa * xa).mean(axis=axes, keepdims=True) + eps))
    rest = list(affine)
    if a.get("has_w"):
        y = y * _acc(rest.pop(0))
    if a.get("has_b"):
        y = y + _acc(rest.pop(0))
    return y


@k("layer_norm_bwd", "rms_norm_bwd")
def _norm_bwd(v, x, g, *weight, prog):
    """dx (and g * xhat with a weight) in x's compute type (f16 in f32, rounded once on store): the formula
    of autodiff._norm_composite_bwd, with the row statistics computed once."""
    a = v.attrs
    xa, ga = _acc(x), _acc(g)
    axes = tuple(range(x.ndim - int(a["n_axes"]), x.ndim))
    one = xa.dtype.type(1)
    d = xa - xa.mean(axis=axes, keepdims=True) if v.op == "layer_norm_bwd" else xa
    r = one / np.sqrt((d * d).mean(axis=axes, keepdims=True) + xa.dtype.type(a["eps"]))
    xh = d * r
    gh = ga * _acc(weight[0]) if weight else ga
    inner = xh * (gh * xh).mean(axis=axes, keepdims=True)
    if v.op == "layer_norm_bwd":
        inner = inner + gh.mean(axis=axes, keepdims=True)
    dx = r * (gh - inner)
    return (dx, ga * xh) if weight else dx


def _unfold_index(shape, attrs):
    n, c, h, w = shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (attrs[k] for k in ("kernel", "stride", "padding", "dilation"))
    oh, ow = conv_out(h, kh, sh, ph, dh), conv_out(w, kw, sw, pw, dw)
    ki, kj = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
    oi, oj = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    rows = (ki.reshape(-1, 1) * dh + oi.reshape(1, -1) * sh)   # [kh*kw, L] in padded coords
    cols = (kj.reshape(-1, 1) * dw + oj.reshape(1, -1) * sw)
    return rows, cols, (ph, pw), (h, w), (kh * kw, oh * ow)


@k("unfold")
def _unfold(v, x, prog):
    n, c = x.shape[:2]
    rows, cols, (ph, pw), _, (kk, L) = _unfold_index(x.shape, v.attrs)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=v.attrs.get("pad_value", 0.0))
    return xp[:, :, rows, cols].reshape(n, c * kk, L)


@k("fold")
def _fold(v, g, prog):
    n, c, h, w = v.shape
    rows, cols, (ph, pw), _, (kk, L) = _unfold_index(v.shape, v.attrs)
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=_acc(g).dtype)
    np.add.at(out, (slice(None), slice(None), rows, cols), _acc(g).reshape(n, c, kk, L))
    return out[:, :, ph:ph + h, pw:pw + w]


def _attn_mask(v, q, k_, mask):
    lq, lk = q.shape[-2], k_.shape[-2]
    allow = np.ones((lq, lk), bool)
    if v.attrs["causal"]:
        allow = np.tril(allow, k=lk - lq)
    if mask is not None:
        allow = allow & mask
    return allow


def _attn_extra(v, extra):
    """(mask, stream base) from the inputs after q, k, v (and out, lse, dout in the backward)."""
    based = bool(v.attrs.get("based"))
    base = extra[-1] if based else None
    rest = extra[:-1] if based else extra
    return (rest[0] if rest else None), base


def _attn_keep(v, base, lead, lq, lk, i0, i1, dtype):
    """Dropout keep factors [*lead, i1 - i0, lk] (0 or 1 / (1 - p)) of query rows i0..i1, or None: word
    (h * lq + i) * lk + j of the op's Philox block for flattened head h (kernels/attention.wgsl:dropout)."""
    p = float(v.attrs.get("dropout", 0.0))
    if not p:
        return None
    off = _philox_offset(v, base)
    nh = int(np.prod(lead, dtype=np.int64)) if lead else 1
    rows = [stream_bits(v.attrs["key"], off + (h * lq + i0) * lk, (i1 - i0) * lk) for h in range(nh)]
    u = bits_to_uniform(np.stack(rows) if rows else np.zeros((0, (i1 - i0) * lk), np.uint32))
    z = np.where(u >= np.float32(p), np.float32(1.0 / (1.0 - p)), np.float32(0.0)).astype(dtype)
    return z.reshape(tuple(lead) + (i1 - i0, lk))


@k("attention")
def _attention(v, q, k_, val, *extra, prog):
    """Reference attention in blocks of query rows, so the full score matrix is never held either."""
    q, k_, val = _acc(q), _acc(k_), _acc(val)
    m, base = _attn_extra(v, extra)
    scale = v.attrs["scale"]
    out = np.zeros(q.shape[:-1] + (val.shape[-1],), q.dtype)
    lse = np.zeros(q.shape[:-1], q.dtype)
    lq, lk = q.shape[-2], k_.shape[-2]
    blk = max(1, min(lq, (1 << 24) // max(1, lk * max(1, int(np.prod(q.shape[:-2], dtype=np.int64))))))
    for i0 in range(0, lq, blk):
        i1 = min(lq, i0 + blk)
        s = np.matmul(q[..., i0:i1, :], np.swapaxes(k_, -1, -2)) * q.dtype.type(scale)
        allow = _attn_mask(v, q, k_, m)[..., i0:i1, :] if m is not None or v.attrs["causal"] else None
        if allow is not None:
            s = np.where(allow, s, -np.inf)
        mx = np.max(s, axis=-1, keepdims=True, initial=-np.inf)  # initial: Lk may be 0
        mx = np.where(np.isfinite(mx), mx, 0)
        e = np.exp(s - mx)
        den = np.sum(e, axis=-1, keepdims=True)
        with np.errstate(all="ignore"):
            # a query row that may attend to no key gets 0 (like torch), not 0/0; its lse is -inf
            z = _attn_keep(v, base, q.shape[:-2], lq, lk, i0, i1, q.dtype)
            ez = e if z is None else e * z
            out[..., i0:i1, :] = np.where(den > 0, np.matmul(ez, val) / np.where(den > 0, den, 1), 0)
            lse[..., i0:i1] = (mx + np.log(den))[..., 0]
    return out, lse


@k("attention_bwd")
def _attention_bwd(v, q, k_, val, out, lse, dout, *extra, prog):
    q, k_, val, out, dout = (_acc(a) for a in (q, k_, val, out, dout))
    m, base = _attn_extra(v, extra)
    scale = q.dtype.type(v.attrs["scale"])
    dq = np.zeros_like(q)
    dk = np.zeros(k_.shape, q.dtype)
    dv = np.zeros(val.shape, q.dtype)
    delta = np.sum(dout * out, axis=-1, keepdims=True)
    lq, lk = q.shape[-2], k_.shape[-2]
    blk = max(1, min(lq, (1 << 24) // max(1, lk * max(1, int(np.prod(q.shape[:-2], dtype=np.int64))))))
    for i0 in range(0, lq, blk):
        i1 = min(lq, i0 + blk)
        s = np.matmul(q[..., i0:i1, :], np.swapaxes(k_, -1, -2)) * scale
        with np.errstate(over="ignore"):  # rows with no key have lse = -inf; the mask zeroes them
            p = np.exp(s - lse[..., i0:i1, None])
        if m is not None or v.attrs["causal"]:
            p = np.where(_attn_mask(v, q, k_, m)[..., i0:i1, :], p, 0)
        z = _attn_keep(v, base, q.shape[:-2], lq, lk, i0, i1, q.dtype)
        dv += np.matmul(np.swapaxes(p if z is None else p * z, -1, -2), dout[..., i0:i1, :])
        dp = np.matmul(dout[..., i0:i1, :], np.swapaxes(val, -1, -2))
        if z is not None:
            dp = dp * z
        ds = p * (dp - delta[..., i0:i1, :]) * scale
        dq[..., i0:i1, :] = np.matmul(ds, k_)
        dk += np.matmul(np.swapaxes(ds, -1, -2), q[..., i0:i1, :])
    return dq, dk, dv


@k("nf4_dequant")
def _nf4_dequant(v, codes, absmax, prog):
    """Table lookup times the block's absmax, in f32 (the WGSL kernel computes the same product)."""
    n = math.prod(v.attrs["shape"])
    b = np.asarray(codes).reshape(-1).view(np.uint8)
    nib = np.empty(2 * b.size, np.uint8)
    nib[0::2], nib[1::2] = b & 0x0F, b >> 4
    table = np.asarray(NF4_TABLE, np.float32)
    scale = np.asarray(absmax, np.float32)[np.arange(n) // int(v.attrs["block"])]
    return (table[nib[:n]] * scale).reshape(v.attrs["shape"])
