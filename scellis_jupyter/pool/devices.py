"""Which device each pool worker runs its Programs on, and the per-worker engine that keeps a run's buffers there.

Why a worker-side engine: on a wgpu adapter, opening a device, compiling kernels and uploading weights
cost far more than a step, so a pooled run opens one backend per (run, worker), keeps its parameters and
optimizer state in device buffers between steps, and moves only what must travel (a slice's gradients
to the host for the worker-side tree reduction, the reduced gradient back). The engine lives in the worker
process (a module-level table keyed by run and worker address: in-process workers share one process);
a Dask future of a small token stands for it, so each task depends on the one before it on that worker.

Device names per worker: "reference" (numpy), "wgpu" (the best adapter), "wgpu:N" (the N-th GPU adapter, or
the N-th wgpu adapter where there is no GPU, cycling when there are fewer than N+1: two workers can share
one GPU), or part of an adapter's name.
"""
from __future__ import annotations

import secrets
import threading
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..backends.device import Device
from ..backends.device import device as pick
from ..backends.device import devices as all_devices
from ..errors import PoolError


def parse_devices(device: str | None, devices: list | None, count: int) -> list[str]:
    """One device name per worker: `devices` cycled over `count` workers, else `device` for all of them."""
    if devices is not None:
        names = [str(d) for d in devices]
        if not names:
            raise PoolError("devices=[] names no device", where="pool devices", hint='devices=["wgpu:0", "wgpu:1"]')
    else:
        names = [str(device or "reference")]
    out = [names[i % len(names)] for i in range(count)]
    kinds = {n == "reference" for n in out}
    if len(kinds) > 1:
        raise PoolError(f"devices {out} mix the reference backend with wgpu adapters; the workers must run the "
                        "same backend (one tier, one planned Program)", where="pool devices",
                        hint='give every worker a wgpu device, or device="reference"')
    for n in out:
        _check_name(n)
    return out


def _check_name(name: str) -> None:
    if name.startswith("wgpu:"):
        idx = name[5:]
        if not idx.isdigit():
            raise PoolError(f"device {name!r}: after 'wgpu:' comes an adapter index", where="pool devices",
                            hint='e.g. "wgpu:0"')


def _adapters() -> list[Device]:
    """The adapters "wgpu:N" counts: the GPUs when there are any (a software adapter beside a GPU is not
    one of "the GPUs"), else every wgpu adapter (llvmpipe)."""
    wgpu = [d for d in all_devices() if d.backend == "wgpu"]
    return [d for d in wgpu if d.is_gpu] or wgpu


def resolve(name: str) -> Device:
    """The Device a worker runs on for `name` (in this process: its adapters)."""
    if name.startswith("wgpu:"):
        gpus = _adapters()
        if not gpus:
            raise PoolError(f"device {name!r}: this worker sees no wgpu adapter", where="pool devices",
                            hint="install a Vulkan driver, or run it on device='reference'")
        return gpus[int(name[5:]) % len(gpus)]
    return pick(name)


def adapter_index(name: str) -> int | None:
    """The index of the adapter `name` lands on (after cycling), or None for anything but "wgpu:N"."""
    if not name.startswith("wgpu:"):
        return None
    n = len(_adapters())
    return int(name[5:]) % n if n else None


# ---- on a worker ------------------------------------------------------------------------------------------
class Engine:
    """One run's backend on one worker: its device, its storages (by leaf name), its built Programs."""

    def __init__(self, name: str):
        self.device = resolve(name)
        self.impl = self.device.fresh_impl()
        self.values: dict[str, Any] = {}
        self.step = 0
        self.host: dict[str, np.ndarray] = {}      # what a run keeps on the worker's host, not on its device
        self.pending: dict[str, np.ndarray] = {}
        self.lock = threading.Lock()      # a worker with several threads runs one of this run's tasks at a time

    def put(self, name: str, a, dtype: str = "f32", shape=None) -> Any:
        """Upload `a` as leaf `name` (written over in place when the shape is the same)."""
        a = np.asarray(a, dtype=dt.to_numpy(dtype))    # no copy when it is already of that dtype
        if shape is not None:
            a = a.reshape(shape)
        held = self.values.get(name)
        if held is not None and tuple(held.shape) == tuple(a.shape) and held.dtype == dtype:
            self.impl.write(held, a)
        else:
            held = self.values[name] = self.impl.from_numpy(a, dtype)
        return held

    def read(self, names: list[str]) -> dict[str, np.ndarray]:
        got = self.impl.read_many([self.values[n] for n in names]) if names else []
        return {n: np.array(a) for n, a in zip(names, got)}


_ENGINES: dict[tuple, Engine] = {}


def _here() -> str:
    try:
        from distributed import get_worker
        return get_worker().address
    except ValueError:        # not in a worker (a direct call): this process
        return "local"


def engine(run: str, name: str | None = None) -> Engine:
    """This worker's engine of run `run` (created on device `name` on first use)."""
    key = (run, _here())
    got = _ENGINES.get(key)
    if got is None:
        if name is None:
            raise PoolError(f"run {run[:12]} has no engine on this worker (it was released or the worker "
                            "restarted)", where="pool engine", hint="start the run again")
        if len(_ENGINES) > 16:           # runs never closed: drop the oldest
            _ENGINES.pop(next(iter(_ENGINES)))
        got = _ENGINES[key] = Engine(name)
    return got


def release(run: str) -> bool:
    """Drop this worker's engine of `run` (its device buffers go with it)."""
    return _ENGINES.pop((run, _here()), None) is not None


def device_info(name: str) -> dict:
    """On a worker: what `name` resolves to there (backend, adapter name, memory)."""
    d = resolve(name)
    return {"asked": name, "backend": d.backend, "name": d.name, "adapter_type": d.adapter_type,
            "memory_bytes": int(d.memory_bytes), "adapter_index": adapter_index(name)}


def new_run_id() -> str:
    return secrets.token_hex(12)
