"""What a Pool is made of, as one dict: its workers, their devices and memory, the trust regime, the dashboard.

Why asked of the workers: a joined cluster's workers are other machines, so each worker reports the device
it would train on (its own SCELLIS_DEVICE or choice) and Dask reports its memory limit; the client knows
only the scheduler's address and where Dask's dashboard would be served.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any


def _worker_device() -> dict:
    """On a worker: the device it would run Programs on, and its process id."""
    from ..backends.device import device
    try:
        d = device()             # $SCELLIS_DEVICE, else the best
        return {"backend": d.backend, "name": d.name, "memory_bytes": int(d.memory_bytes), "pid": os.getpid()}
    except Exception as e:                        # a worker without a usable device still shows up
        return {"backend": None, "name": f"no device: {type(e).__name__}: {e}", "memory_bytes": None,
                "pid": os.getpid()}


def dashboard_link(pool) -> str | None:
    """The URL of Dask's dashboard for this pool's scheduler (served where bokeh is installed), or None."""
    info = pool.client.scheduler_info()
    port = (info.get("services") or {}).get("dashboard")
    if port is None:
        return None
    host = pool.client.scheduler.address.split("://")[-1].rsplit(":", 1)[0]
    if host.startswith("inproc") or "/" in host:
        host = "127.0.0.1"
    return f"http://{host}:{port}/status"


def describe(pool) -> dict[str, Any]:
    """{kind, scheduler, trust, dashboard, dashboard_served, workers: [{address, threads, memory_limit, device...}]}."""
    info = pool.client.scheduler_info()
    devices = pool.client.run(_worker_device)
    workers = []
    for addr in sorted(info["workers"]):
        w = info["workers"][addr]
        d = devices.get(addr, {})
        workers.append({"address": addr, "threads": w.get("nthreads"), "memory_limit": w.get("memory_limit"),
                        "device": d.get("name"), "backend": d.get("backend"),
                        "device_memory": d.get("memory_bytes"), "pid": d.get("pid"),
                        "quarantined": addr in getattr(pool, "quarantined", set())})
    return {"kind": "joined" if pool.cluster is None else "local", "scheduler": pool.client.scheduler.address,
            "trust": getattr(pool, "trust", "own"), "dashboard": dashboard_link(pool),
            "dashboard_served": importlib.util.find_spec("bokeh") is not None, "workers": workers}


def describe_text(d: dict) -> str:
    """The description as the few lines a notebook or terminal shows."""
    def mib(n):
        return "-" if not n else f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
    dash = d["dashboard"] or "none"
    if d["dashboard"] and not d["dashboard_served"]:
        dash += "  (Dask serves it with bokeh installed: pip install bokeh)"
    n = len(d["workers"])
    lines = [f"pool ({d['kind']}): {n} worker{'' if n == 1 else 's'}, trust regime {d['trust']}, scheduler {d['scheduler']}",
             f"dashboard  {dash}"]
    for w in d["workers"]:
        lines.append(f"  {w['address']}  threads {w['threads']}  memory {mib(w['memory_limit'])}  "
                     f"device {w['device']} ({mib(w['device_memory'])})" + ("  QUARANTINED" if w["quarantined"] else ""))
    return "\n".join(lines)
