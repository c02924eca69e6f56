"""wgpu runtime: device, buffers, the arena, pipeline/bind-group caches, one compute pass per program.

Why this shape: WebGPU charges for pipeline and bind-group creation and for every pass, so pipelines
are cached by specialized source, bind groups by (pipeline, bound ranges), each program records one
compute pass, and the queue is only flushed on readback or upload. Kernel launchers (kernels_*.py)
see only `launch()` and `Storage` windows, and split work that exceeds the binding limit.
"""
from __future__ import annotations

import os
import struct
import sys
import time
import weakref
from typing import Callable, Sequence

import numpy as np

from ... import dtypes as dt, settings
from ...errors import DeviceError, DeviceGone, DTypeError, KernelError
from ..profiling import dispatch_tag, exclusive_seconds
from ..storage import Storage, bind
from ...program.liveness import align
from . import shaders, webgpu
from .shaders import compile_message
from .kernels import LAUNCHERS
from .templates import render

USAGE_STORAGE = 0x80 | 0x04 | 0x08   # STORAGE | COPY_SRC | COPY_DST
USAGE_UNIFORM = 0x40 | 0x08          # UNIFORM | COPY_DST
PARAM_ALIGN = 256                    # minUniformBufferOffsetAlignment upper bound
WG_MAX = 65535


def env_binding_limit(granted: int) -> int:
    """SCELLIS_MAX_BINDING_BYTES lowers the granted storage-binding limit (to a multiple of 256)."""
    n = settings.number("SCELLIS_MAX_BINDING_BYTES")
    return granted if n is None else min(granted, n // 256 * 256)


STAGING_MAX = 64 << 20   # a readback maps at most this many bytes at once
POOL_MAX = 64   # output buffers kept for reuse (free ones are dropped first when full), or twice the most
                # outputs of one program run here if more: a pool worker's gradient program returns every
                # gradient (about 100 for the GPT benchmark), and a pool smaller than that drops and makes
                # them anew each run, so its quick replay never finds its buffers again
FLUSH_AFTER_S = 2e-4    # a program ending on a pass open this long submits it (GPU and host overlap)


def env_flush_after(default: float = FLUSH_AFTER_S) -> float:
    """SCELLIS_WGPU_FLUSH_US: how long (microseconds) a pass records before a program's end submits it.
    Longer means fewer submits (each costs the driver tens of microseconds) for the same GPU work; shorter
    starts the GPU sooner. For measuring the trade-off on an adapter; the default suits both."""
    us = settings.number("SCELLIS_WGPU_FLUSH_US")
    return default if us is None else us * 1e-6

# WebGPU's default limits (the spec's "default" column) that kernels depend on. Every kernel must
# work under them (a browser grants no more without asking); SCELLIS_WGPU_LIMITS=default opens the
# device with exactly these, so the kernel tests can be run as a browser would run them.
WEBGPU_DEFAULT_LIMITS = {
    "max-storage-buffer-binding-size": 134217728, "max-buffer-size": 268435456,
    "max-compute-workgroup-storage-size": 16384, "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroup-size-x": 256, "max-compute-workgroup-size-y": 256, "max-compute-workgroup-size-z": 64,
    "max-compute-workgroups-per-dimension": 65535, "max-storage-buffers-per-shader-stage": 8,
    "max-uniform-buffer-binding-size": 65536, "max-bind-groups": 4,
}


def int64_wanted() -> bool:
    """SCELLIS_WGPU_INT64=off opens the device without `shader-int64`, so Philox draws take their 32-bit path
    (kernels/common.wgsl ph_mulhilo, as on an adapter that lacks it); anything else asks for it when granted."""
    return settings.flag("SCELLIS_WGPU_INT64")


def subgroups_wanted() -> bool:
    """SCELLIS_WGPU_SUBGROUPS=off opens the device without the `subgroup` feature, so the kernels take
    their workgroup-memory paths (as on an adapter that lacks it); anything else asks for it when granted."""
    return settings.flag("SCELLIS_WGPU_SUBGROUPS")


def subgroup_matrix_wanted() -> bool:
    """SCELLIS_WGPU_SUBGROUP_MATRIX=off opens a Dawn device without `chromium-experimental-subgroup-matrix`, so
    f16 products take the ordinary ALU kernels (as on an adapter that lacks it)."""
    return settings.flag("SCELLIS_WGPU_SUBGROUP_MATRIX")


def program_key(backend: str, implementation: str | None) -> str:
    """The backend string Programs are compiled and cached under: `wgpu` on wgpu-native, `wgpu+dawn` on Dawn."""
    return backend if implementation in (None, "", webgpu.NATIVE) else f"{backend}+{implementation}"


def requested_limits(adapter_limits) -> dict:
    """The limits to open the device with: the adapter's best, or WebGPU's defaults when
    SCELLIS_WGPU_LIMITS=default."""
    if settings.choice("SCELLIS_WGPU_LIMITS") == "default":
        return {k: min(v, adapter_limits[k]) if k in adapter_limits else v for k, v in WEBGPU_DEFAULT_LIMITS.items()}
    return {k: adapter_limits[k] for k in ("max-storage-buffer-binding-size", "max-buffer-size",
                                           "max-compute-workgroup-storage-size",
                                           "max-compute-invocations-per-workgroup",
                                           "max-compute-workgroup-size-x") if k in adapter_limits}


class WgpuBackend:
    name = "wgpu"

    def __init__(self, adapter, label: str, memory_bytes: int | None = None, implementation=None):
        """`memory_bytes`: the device's memory as the Device found or was told it (kernels that trade
        scratch for speed keep to a share of it); None: unknown. `implementation`: the webgpu.Implementation
        the adapter came from (wgpu-native when None)."""
        impl = implementation or webgpu.load(webgpu.NATIVE)
        self.webgpu = impl
        self.implementation = impl.name
        self.implementation_version = impl.version
        # what Programs compiled for this backend are cached under: the implementation is part of the key
        self.program_key = program_key("wgpu", impl.name)
        self.wgpu = impl.module
        self.label = label
        self.memory_bytes = memory_bytes
        info = dict(getattr(adapter, "info", None) or {})
        # what tuning caches are keyed by: the same chip, driver and WebGPU implementation tune the same way
        self.adapter_id = "|".join(str(info.get(k, "")) for k in ("vendor_id", "device_id", "device", "description",
                                                                   "backend_type")) or label
        if impl.name != webgpu.NATIVE:
            self.adapter_id += f"|{impl.name}"
        self.adapter_type = str(info.get("adapter_type", ""))   # "DiscreteGPU", "IntegratedGPU", "CPU", ...
        self.tier: str | None = None     # the tier of the program being run (launchers may branch on it)
        feats = impl.engine_features(adapter.features)
        want = [f for f in ("shader-f16", "timestamp-query", "subgroup", "shader-int64", "subgroup-matrix")
                if f in feats and (f != "subgroup" or subgroups_wanted()) and (f != "shader-int64" or int64_wanted())
                and (f != "subgroup-matrix" or ("shader-f16" in feats and subgroup_matrix_wanted()))]
        required = requested_limits(adapter.limits)
        self.shader_checks = shaders.checks()   # read once: the policy every kernel of this device compiles under
        self.backend_type = str(info.get("backend_type", ""))   # "Vulkan", "Metal", ...
        # Dawn drops checks per device (its toggles), never per kernel: only when every kernel is asked to
        self.unchecked = impl.name == webgpu.DAWN and self.shader_checks == "none"
        try:
            self.device = impl.open_device(adapter, want, required, unchecked=self.unchecked)
        except Exception as e:  # pragma: no cover - driver specific
            raise DeviceError(f"could not open the adapter through {impl.name}: {e}", where=f"device {label}") from e
        self.sgm_configs = [c for c in impl.subgroup_matrix_configs(adapter)] if "subgroup-matrix" in want else []
        self._raw = impl.raw_calls()
        # WebGPU's rule against a writable binding overlapping another in one dispatch, which Dawn enforces:
        # inputs that would are copied apart first (`_unaliased`)
        self.unalias = impl.name in webgpu.TINT
        self.queue = self.device.queue
        self.features = set(want)
        self.limits = dict(self.device.limits)
        self.max_buffer = int(self.limits["max-buffer-size"])
        self.binding_limit = env_binding_limit(int(self.limits["max-storage-buffer-binding-size"]))
        self.has_f16 = "shader-f16" in self.features
        # kernels with a subgroup path pick it when their pipeline is built (their cache keys say which)
        self.subgroups = "subgroup" in self.features
        # Philox draws multiply in 64 bits when granted (kernels/common.wgsl; their cache keys say which)
        self.int64 = "shader-int64" in self.features
        self.offset_align = int(self.limits.get("min-storage-buffer-offset-alignment", 256))
        self.flush_after = env_flush_after()
        # pipelines by key; a device that several backends share (the browser's page) keeps one cache for all
        self._pipelines: dict = getattr(self.device, "scellis_pipeline_cache", None)
        if self._pipelines is None:
            self._pipelines = {}
        self._bind_groups: dict = {}
        self._arena = None
        self._arena_size = 0
        self._arena2 = None          # a split arena's second buffer (program/liveness.py)
        self._arena2_size = 0
        self.allocated = 0
        self.peak = 0
        self.staging_peak = 0
        self._encoder = None
        self._pass = None
        self._pass_opened = 0.0
        self._mode = None
        self._params = bytearray()
        self._pending: list = []
        self._cursor = 0
        self._prog_params: dict = {}
        self._records: dict = {}        # program hash -> Record: its dispatches in terms of root slots
        self._fast: dict = {}           # (record, uniform block, root buffers) -> resolved raw dispatches
        self._quick: dict = {}          # program hash -> _Quick: the executor's whole-program replay by root windows
        self._trace: list | None = None
        self._roots: list = []
        self._pool: dict = {}           # size -> output buffers, reused once nothing but the pool refers to them
        self._pool_n = 0
        self._pool_cap = POOL_MAX
        self._scratch: dict = {}        # uid -> buffer the backend keeps for launchers (replayable bindings)
        self._scratch_by_name: dict = {}
        self._dry: dict = {}            # program hash -> (uniform block bytes, scratch bytes by name), planned
        self._dry_scratch: dict = {}
        self._collect = None            # (launches, buffer names) while `launches` runs the launchers dry
        self._collect_step = 0
        self.dispatches = 0
        self.raw_replays = 0            # programs replayed through the direct wgpu-native path
        self.quick_replays = 0          # of those, programs the executor replayed by their root windows alone
        self._timing: dict | None = None     # profiling: every dispatch in its own timestamped pass
        self._tag: dict | None = None        # profiling: the dispatch being launched (op, scope, shapes)
        self._kernel_names: dict = {}       # id(pipeline) -> kernel name (the launch key before ':')
        self._op: str = ""
        self._lost = None
        try:
            self.device.lost.then(lambda info: setattr(self, "_lost", info)) if hasattr(self.device.lost, "then") else None
        except Exception:
            pass

    def use_subgroups(self, on: bool) -> None:
        """Switch the kernels' subgroup paths on (only where the device has the feature) or off, and forget
        recorded programs so that none replays a pipeline built for the other path (tests run both)."""
        self.subgroups = bool(on) and "subgroup" in self.features
        self.forget_programs()

    def use_int64(self, on: bool) -> None:
        """Switch the Philox draws' 64-bit multiplies on (only where the device has `shader-int64`) or off, and
        forget recorded programs, as use_subgroups does (tests run both)."""
        self.int64 = bool(on) and "shader-int64" in self.features
        self.forget_programs()

    def forget_programs(self) -> None:
        """Drop every recorded program and its cached dispatch parameters, so the next run of each goes
        through its launchers again: for a switch that changes which kernels a launcher picks (the
        subgroup paths, SCELLIS_ATTENTION_PATH and other benchmarking switches) within one process; the
        plans' dry runs are forgotten with them."""
        self.flush()
        self._records.clear()
        self._prog_params.clear()
        self._quick.clear()
        self._dry.clear()

    # ---- memory -------------------------------------------------------------------------------------
    def _track(self, n: int) -> None:
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    @staticmethod
    def alloc_bytes(nbytes: int) -> int:
        """Bytes one buffer for `nbytes` takes (the planner counts with the same rule)."""
        return align(max(nbytes, 4), 16)

    @classmethod
    def arena_bytes(cls, nbytes: int) -> int:
        return cls.alloc_bytes(max(nbytes, 256))

    @staticmethod
    def staging_bytes(nbytes_list) -> int:
        """Bytes of the mapped buffer one `read_many` of storages of these sizes creates (at most
        STAGING_MAX: larger reads go through it in pieces)."""
        return min(sum(align(n, 4) if n else 0 for n in nbytes_list), STAGING_MAX)

    pools_outputs = True            # program outputs come from a pool and stay allocated when freed

    def _buffer(self, nbytes: int, usage=USAGE_STORAGE):
        nbytes = self.alloc_bytes(nbytes)
        if nbytes > self.max_buffer:
            raise DeviceError(f"a buffer of {nbytes} bytes exceeds the adapter's max buffer size "
                              f"{self.max_buffer}", where=f"device {self.label}",
                              hint="shrink the batch or split the tensor")
        self._check_lost()
        b = self.device.create_buffer(size=nbytes, usage=usage)
        self._track(nbytes)
        weakref.finalize(b, self._untrack, nbytes)
        return b

    def _untrack(self, n: int) -> None:
        self.allocated -= n

    def arena(self, nbytes: int):
        return self._grown("_arena", nbytes)

    def arenas(self, first: int, second: int) -> tuple:
        """A split arena's two buffers (program/liveness.py), each grown like `arena`: the first is the arena
        itself, the second a buffer of its own that only split programs bind."""
        return self._grown("_arena", first), self._grown("_arena2", second)

    def _grown(self, name: str, nbytes: int):
        """The arena buffer in attribute `name` (its size in `name`_size), replaced by one of at least `nbytes`
        when smaller: the old one goes before the new one comes (never both held), with what binds it."""
        buf = getattr(self, name)
        if buf is None or nbytes > getattr(self, name + "_size"):
            self.flush()
            if buf is not None:
                self._bind_groups.clear()
                self._fast.clear()
                self._quick.clear()
                buf = None
                setattr(self, name, None)
            buf = self._buffer(self.arena_bytes(nbytes))
            setattr(self, name, buf)
            setattr(self, name + "_size", buf.size)
        return buf

    def scratch(self, name: str, nbytes: int):
        """A buffer of at least `nbytes` that the backend keeps for a launcher's internal use (grown when
        too small); recorded programs may bind it, since it outlives them."""
        if self._mode == "dry":              # planning: record the need, allocate nothing
            self._dry_scratch[name] = max(self._dry_scratch.get(name, 0), nbytes)
            b = _FakeBuffer(None)
            if self._collect is not None:
                self._collect[1][b.uid] = f"scratch:{name}"
            return b
        b = self._scratch_by_name.get(name)
        if b is None or b.size < nbytes:
            if b is not None:                # the old one goes before the new one comes
                self._scratch.pop(b.uid, None)
                self._scratch_by_name.pop(name)
                b = None
            b = self._buffer(nbytes)
            self._scratch_by_name[name] = b
            self._scratch[b.uid] = b
        return b

    def alloc_storage(self, shape, dtype, nbytes: int) -> Storage:
        """A buffer for a program output: a pooled one of the same size that nothing refers to any more
        (written only by kernels queued after every earlier use, so reuse is ordered), else a new one."""
        self._dtype_ok(dtype)
        size = self.alloc_bytes(nbytes)
        same = self._pool.get(size)          # by size: a lookup does not walk every pooled buffer
        if same:
            for i in range(len(same)):
                if sys.getrefcount(same[i]) <= 2:   # the pool's and the call's
                    b = same.pop(i)
                    same.append(b)
                    return Storage(self, b, 0, tuple(shape), dtype, nbytes)
        b = self._buffer(nbytes)
        if self._pool_n >= self._pool_cap:
            free = [(sz, x) for sz, lst in self._pool.items() for x in lst if sys.getrefcount(x) <= 3]
            for sz, x in free[: max(1, len(free) // 2)]:
                self._pool[sz].remove(x)
                self._pool_n -= 1
            del free
        if self._pool_n < self._pool_cap:
            self._pool.setdefault(size, []).append(b)
            self._pool_n += 1
        return Storage(self, b, 0, tuple(shape), dtype, nbytes)

    def from_numpy(self, arr: np.ndarray, dtype: str) -> Storage:
        """Uploads always go to a fresh buffer: a queued write lands before the open pass's reads."""
        self._dtype_ok(dtype)
        data = _encode(np.ascontiguousarray(arr), dtype)
        nbytes = dt.nbytes(arr.shape, dtype)
        s = Storage(self, self._buffer(nbytes), 0, tuple(arr.shape), dtype, nbytes)
        self._upload(s.buffer, 0, data)
        return s

    def _upload(self, buffer, offset: int, data: np.ndarray) -> None:
        """Queue `data` (contiguous) into `buffer` at `offset`: straight from the array when its size is whole
        words (the queue copies it; no host copy), else through bytes padded to a word."""
        if not data.nbytes:
            return
        if data.nbytes % 4 == 0:
            self.queue.write_buffer(buffer, offset, np.ascontiguousarray(data).reshape(-1).view(np.uint8))
        else:
            raw = data.tobytes()
            self.queue.write_buffer(buffer, offset, raw + b"\0" * ((-len(raw)) % 4))

    def from_numpy_many(self, items: Sequence[tuple[np.ndarray, str]]) -> list[Storage]:
        """Several uploads, packed where that costs no byte: tensors whose size is a multiple of 256 bytes
        go back to back into shared buffers (slabs of at most the binding limit), so each starts aligned
        and the slab takes exactly the bytes separate buffers would (the planner's count is unchanged);
        any other tensor gets its own buffer. Why: a multi-tensor kernel (the optimizer's update of every
        parameter in one dispatch) needs each operand slot's tensors in one buffer."""
        out: list = [None] * len(items)
        packs: list[list] = []
        room = 0
        cap = min(self.binding_limit, self.max_buffer) // 256 * 256
        for i, (arr, dtype) in enumerate(items):
            self._dtype_ok(dtype)
            nb = dt.nbytes(np.shape(arr), dtype)
            if nb == 0 or nb % 256 or nb > cap:
                out[i] = self.from_numpy(arr, dtype)
                continue
            if not packs or nb > room:
                packs.append([])
                room = cap
            packs[-1].append((i, nb))
            room -= nb
        for pack in packs:
            total = sum(nb for _, nb in pack)
            buf = self._buffer(total)
            off = 0
            for i, nb in pack:
                arr, dtype = items[i]
                out[i] = Storage(self, buf, off, tuple(np.shape(arr)), dtype, nb)
                self._upload(buf, off, _encode(np.ascontiguousarray(arr), dtype))
                off += nb
        return out

    def _dtype_ok(self, dtype) -> None:
        for d in (dtype if isinstance(dtype, tuple) else (dtype,)):
            if d == "f64":
                raise DTypeError("f64 is not available on wgpu", where=f"device {self.label}",
                                 hint="use f32, or the reference device for float64")
            if d == "f16" and not self.has_f16:
                raise DTypeError("f16 needs the adapter feature 'shader-f16', which this adapter lacks",
                                 where=f"device {self.label}", hint="use f32 (precision='fp32')")

    def write(self, s: Storage, arr: np.ndarray) -> None:
        """New contents for an existing storage (same shape and dtype), so its buffer and the bind groups
        over it stay: a loop feeding each step's inputs this way replays its recorded dispatches. A pass
        still open may read the buffer, and a queued write lands before it: that pass is submitted first."""
        self._dtype_ok(s.dtype)
        arr = np.asarray(arr)
        if arr.size != (int(np.prod(s.shape, dtype=np.int64)) if s.shape else 1):
            raise DTypeError(f"{dt.nbytes(arr.shape, s.dtype)} bytes for a storage of {s.nbytes} "
                             f"(shape {list(arr.shape)}, not {list(s.shape)})", where=f"device {self.label}")
        data = _encode(np.ascontiguousarray(arr.reshape(s.shape)), s.dtype)
        if self._pass is not None:
            self.flush()
        self._upload(s.buffer, s.offset, data)

    def to_numpy(self, s: Storage) -> np.ndarray:
        return self.read_many([s])[0]

    def read_many(self, storages: Sequence[Storage]) -> list[np.ndarray]:
        """Several storages in one round trip: their copies join the open pass's command buffer, one
        submit, one map of one staging buffer (a step's loss and its finite flag cost one wait, not two)."""
        self._check_lost()
        sizes = [align(s.nbytes, 4) if s.nbytes else 0 for s in storages]
        total = sum(sizes)
        if total == 0:
            self.flush()
            return [np.zeros(s.shape, dt.to_numpy(s.dtype)) for s in storages]
        self.staging_peak = max(self.staging_peak, total)
        stage = self.staging_bytes([s.nbytes for s in storages])
        tmp = self.device.create_buffer(size=stage, usage=0x0001 | 0x0008)     # MAP_READ | COPY_DST
        self._track(stage)                  # the mapped staging buffer is memory too (the plan's "readback")
        if self._pass is not None:
            self._pass.end()
            enc, self._pass, self._encoder = self._encoder, None, None
        else:
            enc = self.device.create_command_encoder()
        # copy (source buffer, source offset, bytes) pieces into the staging buffer, at most `stage` bytes a
        # round trip: a 4 GiB weight is read through a 64 MiB window, not a 4 GiB mapped copy. Each piece is
        # copied once on the host, straight from the mapped window into its storage's result (no bytes
        # objects in between: a large read held three or four copies of itself at once before).
        raws = [np.empty(size, np.uint8) for size in sizes]
        pieces = []                         # (source buffer, source offset, bytes, storage index, offset in it)
        for k, (st, size) in enumerate(zip(storages, sizes)):
            for lo in range(0, size, stage):
                pieces.append((st.buffer, st.offset + lo, min(stage, size - lo), k, lo))
        i = 0
        try:
            while i < len(pieces):
                off, placed = 0, []
                while i < len(pieces) and off + pieces[i][2] <= stage:
                    buf, src, n, k, lo = pieces[i]
                    enc.copy_buffer_to_buffer(buf, src, tmp, off, n)
                    placed.append((off, n, k, lo))
                    off, i = off + n, i + 1
                self.queue.submit([enc.finish()])
                tmp.map_sync("READ")
                mapped = window = None
                try:
                    mapped = tmp.read_mapped(0, off, copy=False)
                    window = np.frombuffer(mapped, np.uint8)
                    for at, n, k, lo in placed:
                        raws[k][lo:lo + n] = window[at:at + n]
                finally:
                    mapped = window = None      # no view of the mapped memory outlives the map
                    tmp.unmap()
                if i < len(pieces):         # another round trip (no spare encoder after the last one)
                    enc = self.device.create_command_encoder()
        finally:
            tmp.destroy()
            self._untrack(stage)
        out = []
        for st, size, raw in zip(storages, sizes, raws):
            n = int(np.prod(st.shape, dtype=np.int64)) if st.shape else 1
            out.append(_decode(raw, st.shape, st.dtype, n) if size and n else np.zeros(st.shape, dt.to_numpy(st.dtype)))
        return out

    def _check_lost(self) -> None:
        if self._lost is not None:
            raise DeviceError(f"the GPU device was lost: {self._lost}", where=f"device {self.label}",
                              hint="no CPU fallback is taken mid-run; restart the kernel or pick another device")

    # ---- recording ----------------------------------------------------------------------------------
    # A program's dispatch parameters depend only on its structure, so they are written once into one
    # uniform buffer per program; a rerun binds the same offsets (and the same cached bind groups).
    def begin(self, prog, roots=None) -> bool:
        """Start a program; returns True when it was replayed whole from its record (steps skipped).

        roots: the storages every binding of the program lies in (leaves, outputs, the arena). A
        program whose roots sit at the same offsets and sizes as when it was recorded, sharing buffers
        the same way, binds the same windows: its dispatches replay without running the launchers."""
        self._check_lost()
        self.tier = getattr(prog, "tier", None)
        self._pool_cap = max(self._pool_cap, 2 * len(getattr(prog, "persistent", ())))
        self._roots = list(roots or [])
        sig = _signature(self._roots)
        rec = self._records.get(prog.hash)
        if rec is not None and rec[0] == sig and not check_indices() \
                and self._timing is None:            # timed: every dispatch goes through its launcher
            self._param_buf = self._prog_params[prog.hash][0]
            fast = self._replay(rec[1])
            if fast is not None:
                self._remember_quick(prog, rec, fast)
            self._roots = []
            self._flush_if_old()
            return True
        self._trace = [] if roots is not None else None
        cached = self._prog_params.get(prog.hash)
        if cached is None:
            if self.unalias and roots is not None and hasattr(prog, "leaves"):
                # the copies' scratch at its planned size before the first dispatch, so that no scratch grows
                # mid-program (an old buffer a recorded bind group still holds beside its larger successor
                # would take more than the plan counts)
                for name, nbytes in self.dry_run(prog, self._roots[:len(prog.leaves)])[1].items():
                    if name.startswith("unalias"):
                        self.scratch(name, nbytes)
            self._mode, self._params, self._pending = "record", bytearray(), []
        else:
            self._mode, (self._param_buf, self._param_data) = "replay", cached
        self._cursor = 0

    def end(self, prog) -> None:
        mode = self._mode
        if self._mode == "record":
            data = bytes(self._params) or bytes(PARAM_ALIGN)
            buf = self._buffer(len(data), USAGE_UNIFORM)
            self.queue.write_buffer(buf, 0, data)
            self._prog_params[prog.hash] = (buf, data)
            self._param_buf = buf
            p = self._open_pass()
            tags = self._timing["pending"] if self._timing is not None else None
            for k, (pipeline, storages, param, wg) in enumerate(self._pending):
                if tags:                     # a recorded program runs at its end: each pass keeps its own tag
                    self._tag = tags[k]
                self._dispatch_now(p, pipeline, storages, param, wg)
            self._pending = []
            if tags is not None:
                tags.clear()
        self._mode = None
        if self._trace is not None and mode is not None:
            rec = self._to_record(self._trace)
            if rec is not None:
                self._records[prog.hash] = (_signature(self._roots), rec)
        self._trace = None
        self._roots = []
        self._flush_if_old()

    def _flush_if_old(self) -> None:
        """Submit the open pass at a program's end once it has been recording for `flush_after`: the GPU
        then runs what is queued while the host records the next programs (a loop of short programs
        would otherwise leave the GPU idle until the next readback, and pay host and GPU time in series)."""
        if self._pass is not None and time.perf_counter() - self._pass_opened >= self.flush_after:
            self.flush()

    def _to_record(self, trace):
        """Dispatches as (pipeline, [(root slot or buffer, offset, size)], param, wg); None if a binding
        lies in a buffer that is neither a root nor held by the backend (then the program is not replayed)."""
        slot = {}
        for i, r in enumerate(self._roots):
            slot.setdefault(r.buffer.uid, i)
        out = []
        for pipeline, storages, param, wg in trace:
            binds = []
            for st in storages:
                k = slot.get(st.buffer.uid)
                if k is None:
                    if self._scratch.get(st.buffer.uid) is not st.buffer:
                        return None
                    k = st.buffer
                binds.append((k, st.offset, st.nbytes))
            out.append((pipeline, tuple(binds), param, wg))
        return out

    def _replay(self, record) -> None:
        """A recorded program's dispatches into the open pass. The first replay over a given set of root
        buffers resolves its bind groups (through the validating wgpu-py calls); later replays over the same
        buffers (a training loop) reuse that list and call wgpu-native directly (see `_raw_replay`)."""
        p = self._open_pass()
        roots = self._roots
        pbuf = self._param_buf
        key = (id(record), pbuf.uid, tuple([r.buffer.uid for r in roots]))
        fast = self._fast.get(key)
        if fast is not None and self._raw is not None:
            _raw_replay(self._raw, p, fast[0])
            self.dispatches += len(record)
            self.raw_replays += 1
            return fast
        resolved = []
        for pipeline, binds, (off, plen), wg in record:
            bg = self._bind_group(pipeline, pbuf, off, plen,
                                  [(roots[k].buffer if type(k) is int else k, o, n) for k, o, n in binds])
            p.set_pipeline(pipeline)
            p.set_bind_group(0, bg)
            p.dispatch_workgroups(*wg)
            resolved.append((pipeline, bg, wg))
        self.dispatches += len(record)
        if len(self._fast) >= FAST_MAX:            # oldest first: a loop's steady state is the newest
            del self._fast[next(iter(self._fast))]
        # the handles, and the objects that own them (kept alive while the entry lives)
        fast = self._fast[key] = (_raw_list(resolved), resolved, record)
        return fast

    # ---- the executor's quick replay ------------------------------------------------------------------
    def _remember_quick(self, prog, rec, fast) -> None:
        """Key the resolved dispatches of a replayed program by its roots' exact windows (buffer, offset,
        size), so the next run over the same windows skips binding, signature and record lookups."""
        nl, npers = len(prog.leaves), len(prog.persistent)
        roots = self._roots
        arenas = (self._arena, self._arena2)[:len(prog.arena.parts())]
        if self._raw is None or len(roots) != nl + npers + len(arenas) \
                or any(r.buffer is not a for r, a in zip(roots[nl + npers:], arenas)):
            return
        q = self._quick.get(prog.hash)
        if q is None or q.rec is not rec:
            q = self._quick[prog.hash] = _Quick(prog, rec, self)
        key = (tuple([(r.buffer.uid, r.offset, r.nbytes) for r in roots[:nl]]),
               tuple([r.buffer.uid for r in roots[nl:nl + npers]]), tuple(a.uid for a in arenas))
        if key not in q.replays and len(q.replays) >= QUICK_MAX:   # oldest first, as for `_fast`
            del q.replays[next(iter(q.replays))]
        q.replays[key] = fast

    def quick_replay(self, prog, leaves) -> list | None:
        """Run `prog` again over leaves in the same buffer windows as a replay already seen (a training
        loop, a benchmark): pooled outputs, one lookup, the raw dispatches, the outputs' storages. None
        when anything differs (new windows, a new or re-recorded program, a grown arena, no free pooled
        output, timing or index checks on): the executor then takes its full path, which records the
        entry for next time. Costs a few microseconds of Python per program instead of tens."""
        q = self._quick.get(prog.hash)
        if q is None or self._timing is not None or self._records.get(prog.hash) is not q.rec \
                or check_indices():
            return None
        arena, arena2 = self._arena, self._arena2
        if arena is None or q.arena_bytes[0] > self._arena_size:
            return None
        split = len(q.arena_bytes) > 1
        if split and (arena2 is None or q.arena_bytes[1] > self._arena2_size):
            return None
        got = self._known_outputs(q, tuple([(s.buffer.uid, s.offset, s.nbytes) for s in leaves]),
                                  (arena.uid, arena2.uid) if split else (arena.uid,))
        if got is None:
            return None
        fast, bufs = got
        pers = [Storage(self, b, 0, shape, dtype, nbytes) for b, (_, shape, dtype, nbytes) in zip(bufs, q.pers)]
        if self._lost is not None:
            self._check_lost()
        self.tier = q.tier
        _raw_replay(self._raw, self._pass or self._open_pass(), fast[0])
        self.dispatches += q.n
        self.raw_replays += 1
        self.quick_replays += 1
        if time.perf_counter() - self._pass_opened >= self.flush_after:
            self.flush()
        out = []
        for kind, j, d, shape, dtype, nbytes in q.outs:
            if kind == 0:
                out.append(leaves[j])
            elif kind == 1:
                out.append(pers[j])
            else:
                r = leaves[j] if kind == 2 else pers[j] if kind == 3 else None
                out.append(Storage(self, arena if kind == 4 else arena2, d, shape, dtype, nbytes) if r is None
                           else Storage(self, r.buffer, r.offset + d, shape, dtype, nbytes))
        return out

    def _known_outputs(self, q, lkey: tuple, akey: tuple):
        """(resolved dispatches, pooled output buffers) of the newest remembered replay over these leaf windows
        and arenas whose pooled outputs are all free now, or None. Programs that take turns on one backend (a
        pool worker's gradient and update steps) draw same-size outputs from one pool, so the first free buffer
        is often not the one a replay was recorded with: each remembered one is tried."""
        pool, getrefcount = self._pool, sys.getrefcount
        for (kl, kp, ka), fast in reversed(q.replays.items()):
            if kl != lkey or ka != akey:
                continue
            picks = []
            for (size, *_), uid in zip(q.pers, kp):
                same = pool.get(size) or ()
                for i in range(len(same)):
                    if same[i].uid == uid and getrefcount(same[i]) <= 2:   # free: only the pool refers to it
                        picks.append((same, same[i]))
                        break
                else:
                    break
            else:
                for same, b in picks:          # most recently used last, as alloc_storage keeps them
                    same.remove(b)
                    same.append(b)
                return fast, [b for _, b in picks]
        return None

    def _bind_group(self, pipeline, pbuf, off: int, plen: int, binds):
        """The (cached) bind group: the uniform window at `off`, then (buffer, offset, nbytes) storages."""
        key = (id(pipeline), pbuf.uid, off, tuple((b.uid, o, n) for b, o, n in binds))
        bg = self._bind_groups.get(key)
        if bg is None:
            entries = [{"binding": 0, "resource": {"buffer": pbuf, "offset": off, "size": max(align(plen, 16), 16)}}]
            for i, (b, o, n) in enumerate(binds):
                entries.append({"binding": i + 1, "resource": {"buffer": b, "offset": o, "size": align(max(n, 4), 4)}})
            bg = self.device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
            if len(self._bind_groups) > 8192:   # eager outputs are new buffers: keep the cache bounded
                for k in list(self._bind_groups)[:4096]:
                    del self._bind_groups[k]
                self._fast.clear()
                self._quick.clear()
            self._bind_groups[key] = bg
        return bg

    def dry_param_bytes(self, prog, roots) -> int:
        """The uniform parameter block `prog` will need (see `dry_run`)."""
        return self.dry_run(prog, roots)[0]

    def dry_run(self, prog, roots) -> tuple[int, dict]:
        """(uniform parameter block bytes, {scratch name: bytes}) `prog` will allocate, by running its
        launchers without a GPU call.

        Why: the planner predicts every byte the executor allocates; the block depends on how each
        launcher splits its tensors and the scratch buffers on what a launcher needs beside its bindings
        (attention's row statistics for tiny heads), so both are computed by the launchers themselves."""
        got = self._dry.get(prog.hash)
        if got is not None:
            return got
        n, scratch = self._dry_pass(prog, roots, None)
        got = self._dry[prog.hash] = (align(max(n, 4), 16), scratch)
        return got

    def launches(self, prog, roots) -> list[dict]:
        """Every launch `prog` makes, in order, as the launchers make them, without a GPU call (the stage
        explorer's kernels): {step (the position in prog.steps), key (the pipeline's), kernel, wgsl (the text
        the device's compiler gets), groups, bindings: [{buffer, offset, nbytes}]}. A binding's buffer is
        "arena" (or "arena2", a split arena's second), "leaf:<i>" (roots[i]), "persistent:<j>", "scratch:<name>"."""
        out: list[dict] = []
        self._dry_pass(prog, roots, out)
        return out

    def _dry_pass(self, prog, roots, collect: list | None) -> tuple[int, dict]:
        """Run `prog`'s launchers dry: (uniform bytes, {scratch name: bytes}); with `collect`, each launch too."""
        fake: dict = {}
        names: dict[int, str] = {}

        def stand_in(st, i):
            b = fake.setdefault(id(st.buffer), _FakeBuffer(st.buffer))
            names.setdefault(b.uid, f"leaf:{i}")
            return Storage(self, b, st.offset, st.shape, st.dtype, st.nbytes)
        persistent = [Storage(self, _FakeBuffer(None), 0, prog.values[p].shape, prog.values[p].dtype,
                              prog.values[p].nbytes) for p in prog.persistent]
        arenas = tuple(_FakeBuffer(None) for _ in prog.arena.parts())
        names.update({s.buffer.uid: f"persistent:{j}" for j, s in enumerate(persistent)})
        names.update({b.uid: ("arena", "arena2")[k] for k, b in enumerate(arenas)})
        resolve, _ = bind(prog, [stand_in(r, i) for i, r in enumerate(roots)], persistent, self, arenas)
        saved = (self._mode, self._params, self._dry_scratch, self._collect)
        self._mode, self._params, self._dry_scratch = "dry", bytearray(), {}
        self._collect = None if collect is None else (collect, names)
        try:
            for pos, step in enumerate(prog.steps):
                v = prog.values[step]
                self._collect_step = pos
                self.dispatch(v, [resolve(i) for i in v.inputs], resolve(step), prog)
            n = len(self._params) or PARAM_ALIGN
            scratch = {k: self.alloc_bytes(b) for k, b in self._dry_scratch.items()}
        finally:
            self._mode, self._params, self._dry_scratch, self._collect = saved
        return n, scratch

    # ---- uniform bytes a launcher reserves whatever it dispatches ---------------------------------------
    def param_cursor(self) -> int:
        """Where the next dispatch's parameters go in the program's uniform block."""
        return self._cursor if self._mode == "replay" else len(self._params)

    def param_bytes_of(self, fn) -> int:
        """Uniform bytes the launches `fn()` makes would take, without dispatching or keeping them."""
        saved = (self._mode, self._params, self._dry_scratch, self._collect)
        self._mode, self._params, self._dry_scratch = "dry", bytearray(), dict(self._dry_scratch)
        self._collect = None                # a measure, not a launch the program makes
        try:
            fn()
            return len(self._params)
        finally:
            self._mode, self._params, self._dry_scratch, self._collect = saved

    def param_reserve(self, start: int, nbytes: int) -> None:
        """Pad the uniform block so the launches since `start` take exactly `nbytes` (never fewer): a launcher
        whose dispatch count depends on where its tensors lie (a multi-tensor batch) keeps the block's size,
        which the planner predicts from stand-in buffers, independent of that."""
        pad = nbytes - (self.param_cursor() - start)
        if pad < 0:
            raise KernelError("a launcher used more uniform bytes than it reserved", where="uniform block",
                              hint="this is an engine bug")
        if self._mode == "replay":
            self._cursor += pad
        elif self._mode in ("record", "dry"):
            self._params += bytes(pad)

    def _open_pass(self):
        if self._pass is None:
            self._encoder = self.device.create_command_encoder()
            self._pass = self._encoder.begin_compute_pass()
            self._pass_opened = time.perf_counter()
        return self._pass

    def flush(self) -> None:
        """Close the open pass and submit: only on readback, upload into a used buffer, or arena growth."""
        if self._pass is not None:
            self._pass.end()
            self.queue.submit([self._encoder.finish()])
            self._pass = None
            self._encoder = None

    def dispatch(self, value, ins: list[Storage], out: Storage, prog) -> None:
        fn = LAUNCHERS.get(value.op)
        if fn is None:
            raise KernelError(f"no wgpu kernel for op {value.op!r}", where=f"device {self.label}",
                              hint="run it on the reference device")
        self._dtype_ok(value.dtype)
        self._op = value.op
        if self._timing is not None:        # profiling only: what each timed pass of this dispatch was for
            self._tag = dispatch_tag(value, ins)
        if self.unalias:
            ins = self._unaliased(ins, out)
        fn(self, value, ins, out)

    def _unaliased(self, ins: list[Storage], out: Storage) -> list[Storage]:
        """`ins` with every input whose bytes overlap the output's or an earlier input's replaced by a copy in a
        scratch buffer of its own (kernels/copy_words.wgsl). WebGPU forbids a writable binding overlapping another
        in one dispatch, and every kernel binds its operands read_write: Dawn (and a browser) refuse an in-place
        update (a donated output over its input) or x * x, which wgpu-native runs. The copy is a dispatch of the
        program like any other, so records and replays keep it; its scratch is planned with the launcher's."""
        outs = out if isinstance(out, (list, tuple)) else [out]
        seen = [o for o in outs if isinstance(o, Storage)]
        fixed = []
        for i, s in enumerate(ins):
            if isinstance(s, Storage) and s.nbytes and any(_overlap(s, o) for o in seen):
                s = self._copy_apart(s, i)
            fixed.append(s)
            if isinstance(s, Storage):
                seen.append(s)
        return fixed

    def _copy_apart(self, s: Storage, slot: int) -> Storage:
        """A copy of `s` at the start of scratch buffer `unalias<slot>` (the words covering it, so its byte offset
        within a word is kept)."""
        w0, w1 = s.offset // 4, (s.offset + s.nbytes + 3) // 4
        buf = self.scratch(f"unalias{slot}", (w1 - w0) * 4)
        step = (self.binding_limit - self.offset_align) // 4      # words a piece binds, within the limit
        for a in range(w0, w1, step):
            n = min(step, w1 - a)
            src0 = a * 4 // self.offset_align * self.offset_align
            d0 = (a - w0) * 4 // self.offset_align * self.offset_align
            src = Storage(self, s.buffer, src0, (n,), "u32", (a + n) * 4 - src0)
            dst = Storage(self, buf, d0, (n,), "u32", (a - w0 + n) * 4 - d0)
            self.launch("copy_words", lambda: render("copy_words"), [dst, src],
                        pack("<4I", n, (a - w0) - d0 // 4, a - src0 // 4, 0), (n + 255) // 256)
        return Storage(self, buf, s.offset - w0 * 4, s.shape, s.dtype, s.nbytes)

    def checks_for(self, kernel: str) -> str:
        """The naga checks kernel `kernel` (a pipeline key's first field) compiles with (shaders.mode_for)."""
        return shaders.mode_for(self.shader_checks, kernel, self.backend_type, self.implementation)

    def pipeline(self, key: str, source: str | Callable[[], str]):
        """The compiled pipeline of `key`, built from `source` (its WGSL, or a function writing it) on the first
        ask: the key must name everything the text depends on."""
        p = self._pipelines.get(key)
        if p is None:
            text = source() if callable(source) else source
            try:
                mod = self.webgpu.create_module(self.device, text, self.checks_for(key.split(":")[0]),
                                               label=key.split(":")[0])
                p = self.device.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": "main"})
            except DeviceGone:
                raise
            except Exception as e:
                raise KernelError(f"kernel {key.split(':')[0]!r} failed to compile on {self.implementation}: "
                                  f"{compile_message(e, self.webgpu.prelude(text))}", where=f"device {self.label}") from e
            self._pipelines[key] = p
            self._kernel_names[id(p)] = key.split(":")[0]
        return p

    def launch(self, key: str, source: str | Callable[[], str], storages: Sequence[Storage], params: bytes,
               groups) -> None:
        """Queue one dispatch: `storages` bind to @binding(1..n), `params` to the uniform @binding(0).

        `groups` is a workgroup count (folded into x/y under the 65535 limit; kernels rebuild the
        linear id from num_workgroups) or an explicit (x, y, z).
        """
        for s in storages:
            if align(max(s.nbytes, 4), 4) > self.binding_limit:
                raise KernelError(f"a binding of {s.nbytes} bytes exceeds the binding limit {self.binding_limit}"
                                  f" in kernel {key.split(':')[0]!r}", where=f"device {self.label}",
                                  hint="launchers must split tensors larger than the binding limit")
        if isinstance(groups, int):
            if groups <= 0:
                return
            gx = min(groups, WG_MAX)
            gy = (groups + gx - 1) // gx
            if gy > WG_MAX:
                raise KernelError(f"{groups} workgroups exceed {WG_MAX}^2", where=f"kernel {key.split(':')[0]!r}")
            wg = (gx, gy, 1)
        else:
            wg = tuple(int(g) for g in groups)
            if min(wg) <= 0:
                return
        pipeline = self.pipeline(key, source) if self._mode != "dry" else None
        chunk = bytes(params) + bytes((-len(params)) % PARAM_ALIGN) if params else bytes(PARAM_ALIGN)
        param = (self._cursor if self._mode == "replay" else len(self._params), max(len(params), 16))
        if self._mode == "dry":
            self._params += chunk
            if self._collect is not None:
                self._collected(key, source, storages, wg)
            return
        if self._mode == "record":
            self._params += chunk
            self._pending.append((pipeline, list(storages), param, wg))
            if self._timing is not None:
                self._timing["pending"].append(self._tag)
        elif self._mode == "replay":
            if self._param_data[self._cursor:self._cursor + len(chunk)] != chunk:
                raise KernelError("a cached program replayed different dispatch parameters",
                                  where=f"kernel {key.split(':')[0]!r}", hint="this is an engine bug")
            self._cursor += len(chunk)
            self._dispatch_now(self._open_pass(), pipeline, list(storages), param, wg)
        else:
            raise KernelError("launch() outside a program", where=f"kernel {key.split(':')[0]!r}")

    def _collected(self, key: str, source, storages, wg) -> None:
        out, names = self._collect
        text = source() if callable(source) else source
        out.append({"step": self._collect_step, "key": key, "kernel": key.split(":")[0],
                    "wgsl": self.webgpu.prelude(text), "groups": list(wg),
                    "bindings": [{"buffer": names.get(s.buffer.uid, "buffer"),
                                  "offset": int(s.offset), "nbytes": int(s.nbytes)} for s in storages]})

    def _dispatch_now(self, p, pipeline, storages, param, wg) -> None:
        off, plen = param
        bg = self._bind_group(pipeline, self._param_buf, off, plen, [(s.buffer, s.offset, s.nbytes) for s in storages])
        if self._trace is not None:
            self._trace.append((pipeline, storages, param, wg))
        if self._timing is not None:
            p = self._timed_pass(pipeline)
        p.set_pipeline(pipeline)
        p.set_bind_group(0, bg)
        p.dispatch_workgroups(*wg)
        self.dispatches += 1


    # ---- profiling: GPU time per dispatch from timestamp queries --------------------------------------
    def start_timing(self) -> bool:
        """From now on every dispatch runs in its own compute pass whose start and end are timestamped
        (no record replay), until `stop_timing`. False (and nothing changes) without 'timestamp-query'."""
        if "timestamp-query" not in self.features:
            return False
        self.flush()
        self._timing = {"sets": [], "names": [], "pending": []}
        self._tag = None
        return True

    def _timed_pass(self, pipeline):
        t = self._timing
        k = len(t["names"])
        if k % QUERY_PAIRS == 0:
            t["sets"].append(self.device.create_query_set(type="timestamp", count=2 * QUERY_PAIRS))
        if self._pass is not None:
            self._pass.end()
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        j = 2 * (k % QUERY_PAIRS)
        self._pass = self._encoder.begin_compute_pass(timestamp_writes={
            "query_set": t["sets"][-1], "beginning_of_pass_write_index": j, "end_of_pass_write_index": j + 1})
        t["names"].append((self._kernel_names.get(id(pipeline), "?"), self._tag))
        return self._pass

    def stop_timing(self) -> list[dict]:
        """Every dispatch since `start_timing`, in order: {kernel, op, scope, ins, out, s (GPU seconds it adds
        to the timeline, profiling.exclusive_seconds)}, the op, scope and shapes being those of the program
        value that launched it; timing ends."""
        t, self._timing = self._timing, None
        if t is None:
            return []
        self.flush()
        ticks: list[tuple[int, int]] = []
        n = len(t["names"])
        for i, qs in enumerate(t["sets"]):
            count = 2 * min(QUERY_PAIRS, n - i * QUERY_PAIRS)
            res = self.device.create_buffer(size=8 * count, usage=0x0200 | 0x0004)     # QUERY_RESOLVE | COPY_SRC
            out = self.device.create_buffer(size=8 * count, usage=0x0001 | 0x0008)     # MAP_READ | COPY_DST
            enc = self.device.create_command_encoder()
            enc.resolve_query_set(qs, 0, count, res, 0)
            enc.copy_buffer_to_buffer(res, 0, out, 0, 8 * count)
            self.queue.submit([enc.finish()])
            out.map_sync("READ")
            stamps = np.frombuffer(bytes(out.read_mapped()), np.uint64).astype(np.int64)
            out.unmap()
            out.destroy()
            res.destroy()
            qs.destroy()
            ticks.extend(zip(stamps[0::2].tolist(), stamps[1::2].tolist()))     # nanoseconds (WebGPU's unit)
        times = exclusive_seconds(ticks)
        return [{"kernel": k, **(tag or {"op": "?", "scope": "", "ins": [], "out": []}), "s": s}
                for (k, tag), s in zip(t["names"], times)]



FAST_MAX = 64   # resolved replays kept (one per program and set of root buffers)

def _raw_list(resolved) -> list:
    """(pipeline handle or None when unchanged, bind group handle, x, y, z) per dispatch."""
    out, last = [], None
    for pipeline, bg, (x, y, z) in resolved:
        out.append((pipeline._internal if pipeline is not last else None, bg._internal, x, y, z))
        last = pipeline
    return out


def _raw_replay(calls, p, fast: list) -> None:
    """Dispatches already validated once (the same pipelines, bind groups and workgroup counts went
    through wgpu-py's checked calls when the list was made), issued straight to the implementation's C
    functions (`calls`, webgpu.Implementation.raw_calls: wgpu-native's or Dawn's): per dispatch this is a few
    microseconds of host time instead of wgpu-py's wrapper cost, which dominated the per-dispatch cost of a
    training step. Any error the implementation still reports reaches the device's uncaptured-error handler."""
    set_pipeline, set_bind_group, dispatch, null = calls
    h = p._internal
    for pl, bg, x, y, z in fast:
        if pl is not None:
            set_pipeline(h, pl)
        set_bind_group(h, 0, bg, 0, null)
        dispatch(h, x, y, z)


QUICK_MAX = 16  # root windows remembered per program for the quick replay

# SCELLIS_CHECK_INDICES makes every run go through the launchers (host-side index checks). Asked on each
# quick replay, so an unset variable is found in os.environ's own key table (kept in step by os.environ[...]
# = and putenv through it) instead of paying os.environ's encode-and-lookup per call; a set one is read as
# the flag it is (SCELLIS_CHECK_INDICES=0 is off). Other os.environ layouts take the plain reader.
try:
    _ENV_DATA = os.environ._data
    _CHECK_KEY = os.environ.encodekey("SCELLIS_CHECK_INDICES")
except AttributeError:  # pragma: no cover - another os.environ implementation
    _ENV_DATA, _CHECK_KEY = None, None


def check_indices() -> bool:
    if _ENV_DATA is not None and _CHECK_KEY not in _ENV_DATA:
        return False
    return settings.flag("SCELLIS_CHECK_INDICES")


class _Quick:
    """A program's quick-replay facts: its arena need, pooled outputs, where each output lies relative to
    its roots, and the resolved dispatches by root windows. Valid while its record is the backend's."""
    __slots__ = ("rec", "tier", "arena_bytes", "pers", "outs", "n", "replays")

    def __init__(self, prog, rec, be) -> None:
        self.rec = rec
        self.tier = getattr(prog, "tier", None)
        self.arena_bytes = prog.arena.parts()
        self.n = len(rec[1])
        self.pers = [(be.alloc_bytes(prog.values[p].nbytes), tuple(prog.values[p].shape), prog.values[p].dtype,
                      prog.values[p].nbytes) for p in prog.persistent]
        # where the outputs lie: placed with stand-in roots, each output is a root itself (kind 0 leaf,
        # 1 pooled output) or a window at an offset in a leaf (2), a pooled output (3), the arena (4) or a split
        # arena's second buffer (5)
        leaves = [Storage(be, _FakeBuffer(None), 0, prog.values[i].shape, prog.values[i].dtype,
                          prog.values[i].nbytes) for i in prog.leaves]
        pers = [Storage(be, _FakeBuffer(None), 0, prog.values[p].shape, prog.values[p].dtype, prog.values[p].nbytes)
                for p in prog.persistent]
        arenas = tuple(_FakeBuffer(None) for _ in prog.arena.parts())
        resolve, _ = bind(prog, leaves, pers, be, arenas)
        outs = []
        for o in prog.outputs:
            st = resolve(o)
            ident = [k for k, r in enumerate(leaves) if r is st], [k for k, r in enumerate(pers) if r is st]
            if ident[0] or ident[1]:
                outs.append((0, ident[0][0], 0, None, None, 0) if ident[0] else (1, ident[1][0], 0, None, None, 0))
                continue
            lk = [k for k, r in enumerate(leaves) if r.buffer is st.buffer]
            pk = [k for k, r in enumerate(pers) if r.buffer is st.buffer]
            kind, j = (2, lk[0]) if lk else (3, pk[0]) if pk else (4 + arenas.index(st.buffer), -1)
            outs.append((kind, j, st.offset, tuple(st.shape), st.dtype, st.nbytes))
        self.outs = outs
        self.replays: dict = {}


class _FakeBuffer:
    """Stands in for a GPU buffer while launchers run dry (planning): only identity and size matter."""
    _next = [0]

    def __init__(self, like):
        _FakeBuffer._next[0] += 1
        self.uid = -_FakeBuffer._next[0]
        self.size = getattr(like, "size", 0)


QUERY_PAIRS = 2048      # dispatches per timestamp query set (WebGPU allows 4096 queries a set)


def _signature(roots) -> tuple:
    """What a recorded program's bindings depend on: each root's offset and size, and which roots share a buffer."""
    first: dict = {}
    return tuple((r.offset, r.nbytes, first.setdefault(r.buffer.uid, i)) for i, r in enumerate(roots))


def _encode(arr: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return (arr != 0).astype(np.uint32)
    return arr.astype(dt.to_numpy(dtype), copy=False)


def _decode(raw: np.ndarray, shape, dtype: str, n: int) -> np.ndarray:
    """n elements of `dtype` from a uint8 array the caller owns (a view of it; bool: a new array)."""
    if dtype == "bool":
        return (np.frombuffer(raw, np.uint32, count=n) != 0).reshape(shape)
    np_dtype = np.dtype(dt.to_numpy(dtype))
    return raw[:n * np_dtype.itemsize].view(np_dtype).reshape(shape)


def _overlap(a: Storage, b: Storage) -> bool:
    """Whether two windows share bytes of one buffer."""
    return (a.buffer is b.buffer and a.offset < b.offset + max(b.nbytes, 1)
            and b.offset < a.offset + max(a.nbytes, 1))


def pack(fmt: str, *vals) -> bytes:
    return struct.pack(fmt, *vals)
