"""A Jupyter server extension: kernel websockets with Nagle's algorithm off.

Why: the `browser` device waits for one page reply a step, and each comm reply makes the kernel publish `status:
busy`, then the next request, then `status: idle`. jupyter_server leaves the kernel websocket with Nagle's algorithm
on (tornado turns TCP_NODELAY off again once the upgrade's response is written), so the request, a small write
behind the unacknowledged `busy`, waits for the browser's delayed ACK: about 40 ms a step on Linux. Measured in a
JupyterLab tab (benchmarks/browser_device.py --lab): an empty round trip 55 ms with it on, about 17 ms with it off.
Tornado's documentation asks latency-sensitive websocket applications to call `set_nodelay(True)`; this does it for
the kernel websockets of whichever connection class the server is configured with. Installed enabled
(etc/jupyter/jupyter_server_config.d/scellis_jupyter.json); `jupyter server extension disable
scellis_jupyter.jupyter.server_extension` turns it off.
"""
from __future__ import annotations

from typing import Any

NAME = "scellis_jupyter.jupyter.server_extension"


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": NAME}]


def no_delay(base: type) -> type:
    """`base` (a kernel websocket connection class) whose websocket sends each message at once."""
    if getattr(base, "_scellis_no_delay", False):
        return base

    class NoDelay(base):          # type: ignore[misc, valid-type]
        _scellis_no_delay = True

        async def connect(self, *args: Any, **kwargs: Any) -> Any:
            ws = getattr(self, "websocket_handler", None)
            try:
                if ws is not None and getattr(ws, "ws_connection", None) is not None:
                    ws.set_nodelay(True)
            except Exception:     # noqa: BLE001 - a latency tweak must never refuse a connection
                pass
            return await super().connect(*args, **kwargs)

    NoDelay.__name__ = NoDelay.__qualname__ = f"NoDelay{base.__name__}"
    NoDelay.__module__ = __name__
    return NoDelay


def _load_jupyter_server_extension(serverapp: Any) -> None:
    settings = serverapp.web_app.settings
    base = settings.get("kernel_websocket_connection_class") or serverapp.kernel_websocket_connection_class
    if isinstance(base, type):
        settings["kernel_websocket_connection_class"] = no_delay(base)
        serverapp.log.debug("scellis_jupyter: kernel websockets send without delay (%s)", base.__name__)


load_jupyter_server_extension = _load_jupyter_server_extension   # the name older servers look for
