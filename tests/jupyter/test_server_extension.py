"""The server extension (jupyter/server_extension.py): kernel websockets with Nagle's algorithm off, whatever
connection class the server uses, enabled by the config file the install puts under etc/jupyter/. The latency it
buys is measured in benchmarks/browser_device.py --lab, not here."""
import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from scellis_jupyter.jupyter import server_extension as ext

ROOT = Path(__file__).resolve().parents[2]


class _Ws:
    def __init__(self, upgraded=True):
        self.ws_connection = object() if upgraded else None
        self.calls = []

    def set_nodelay(self, value):
        if self.ws_connection is None:
            raise AssertionError("tornado refuses set_nodelay before the upgrade")
        self.calls.append(value)


class _Base:
    order: list = []

    def __init__(self, websocket_handler):
        self.websocket_handler = websocket_handler

    async def connect(self):
        _Base.order.append(("connect", list(self.websocket_handler.calls)))
        return "connected"


def test_the_connection_turns_nagle_off_before_connecting_and_keeps_the_base_behaviour():
    cls = ext.no_delay(_Base)
    assert issubclass(cls, _Base) and cls.__name__ == "NoDelay_Base"
    assert ext.no_delay(cls) is cls                               # wrapped once
    ws = _Ws()
    _Base.order.clear()
    assert asyncio.run(cls(ws).connect()) == "connected"
    assert ws.calls == [True] and _Base.order == [("connect", [True])]
    ws = _Ws(upgraded=False)                                     # never refuses a connection
    assert asyncio.run(cls(ws).connect()) == "connected" and ws.calls == []


def test_loading_wraps_the_configured_class_in_the_web_app():
    class App:
        kernel_websocket_connection_class = _Base
        log = type("L", (), {"debug": staticmethod(lambda *a, **k: None)})()
        web_app = type("W", (), {"settings": {"kernel_websocket_connection_class": _Base}})()
    ext._load_jupyter_server_extension(App)
    got = App.web_app.settings["kernel_websocket_connection_class"]
    assert issubclass(got, _Base) and got._scellis_no_delay
    assert ext._jupyter_server_extension_points() == [{"module": "scellis_jupyter.jupyter.server_extension"}]


def test_the_install_enables_it_and_the_server_validates_it():
    """The README's install puts the config file under the environment's etc/jupyter/: a server started there lists
    the extension enabled and loads it."""
    cfg = json.loads((ROOT / "jupyter-config" / "jupyter_server_config.d" / "scellis_jupyter.json").read_text())
    assert cfg["ServerApp"]["jpserver_extensions"] == {ext.NAME: True}
    installed = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "scellis_jupyter.json"
    assert installed.is_file() and json.loads(installed.read_text()) == cfg, installed
    r = subprocess.run([sys.executable, "-m", "jupyter", "server", "extension", "list"], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, NO_COLOR="1"))
    out = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)
    assert re.search(rf"{re.escape(ext.NAME)}\s+enabled", out), out
    assert re.search(rf"{re.escape(ext.NAME)}\s+OK", out), out
