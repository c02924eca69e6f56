"""Background training in a real Jupyter kernel (jupyter_client): the cell returns while training goes on,
and a kernel restart in the middle leaves the run `interrupted` (never `running`), resumable from a fresh
kernel with `%scellis resume NAME`. Both a clean restart (the kernel shuts down: it checkpoints) and a
killed kernel (no chance to: the heartbeat's process check settles it) are covered."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

ROOT = Path(__file__).resolve().parents[2]

SETUP = """
%load_ext scellis_jupyter
import numpy as np
from sklearn.datasets import load_digits
X, y = load_digits(return_X_y=True)
"""
CELL = """%%scellis mlp
[data]
train = "X, y"
[model]
nodes = [{ op = "linear", out = 32 }, { op = "relu" }, { op = "linear", out = 10 }]
[recipe]
batch_size = 16
"""


class Kernel:
    def __init__(self, tmp: Path):
        env = dict(os.environ, PYTHONPATH=str(ROOT), SCELLIS_DEVICE="reference", SCELLIS_STORE=str(tmp / "store"))
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env, cwd=str(tmp))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 120) -> dict:
        out = {"text": "", "error": None, "data": [], "streams": []}

        def hook(msg):
            c = msg["content"]
            t = msg["msg_type"]
            if t == "stream":
                out["text"] += c["text"]
                out["streams"].append((c["name"], c["text"]))
            elif t in ("display_data", "execute_result", "update_display_data"):
                out["data"].append(c["data"])
            elif t == "error":
                out["error"] = (c["ename"], c["evalue"], "\n".join(c["traceback"]))
        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        out["status"] = reply["content"]["status"]
        return out

    def value(self, expr: str):
        r = self.run(f"print(repr({expr}))")
        assert r["error"] is None, r["error"]
        import ast
        return ast.literal_eval(r["text"].strip().splitlines()[-1])

    def restart(self, now: bool) -> None:
        self.km.restart_kernel(now=now)
        self.kc.wait_for_ready(timeout=60)

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture
def kernel(tmp_path):
    k = Kernel(tmp_path)
    yield k
    k.close()


def _store(tmp_path):
    from scellis_jupyter.store import Store
    return Store.open(tmp_path / "store")


def _records(tmp_path):
    from scellis_jupyter.store import list_runs
    return list_runs(_store(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("now", [False, True], ids=["clean-restart", "killed"])
def test_kernel_restart_mid_run_leaves_it_interrupted(kernel, tmp_path, now):
    assert kernel.run(SETUP)["error"] is None
    assert kernel.run(CELL)["error"] is None
    t0 = time.monotonic()
    r = kernel.run("%scellis train mlp --steps 100000 --checkpoint-every 20")
    assert r["error"] is None and time.monotonic() - t0 < 30              # returned while training goes on
    assert kernel.value("mlp.run.state") == "running"
    deadline = time.monotonic() + 120
    while kernel.value("mlp.run.step") < 45 and time.monotonic() < deadline:   # other cells keep running
        time.sleep(0.2)
    run_id = kernel.value("mlp.run.run_id")
    kernel.restart(now=now)
    (rec,) = _records(tmp_path)
    assert rec.id == run_id and rec.state == "interrupted", rec.state
    assert rec.last_checkpoint and rec.last_checkpoint_step(_store(tmp_path)) >= 40
    if now:                                     # killed: the store settles it (its process is gone)
        assert "is gone" in rec.error["message"]
    else:                                       # shut down: the kernel interrupted it itself, checkpointed
        assert rec.error["message"] == "the kernel shut down"
        assert rec.last_checkpoint_step(_store(tmp_path)) >= 45
    # a fresh kernel: define the model again and resume it from the store
    assert kernel.run(SETUP)["error"] is None
    assert kernel.run(CELL)["error"] is None
    assert kernel.value("mlp.run") is None
    # the run may get well past step 45 while the kernel shuts down: resume to 35 steps past where it stopped
    target = rec.last_checkpoint_step(_store(tmp_path)) + 35
    r = kernel.run(f"%scellis resume mlp --steps {target} --wait", timeout=300)
    assert r["error"] is None and "UsageError" not in r["text"], (r["error"], r["text"][-800:])
    assert kernel.value("(mlp.run.state, mlp.run.step)") == ("finished", target)
    recs = {x.id: x for x in _records(tmp_path)}
    assert recs[run_id].state == "interrupted" and len(recs) == 2
    new = next(x for x in recs.values() if x.id != run_id)
    assert new.state == "finished" and new.extra["resumed_from_run"] == run_id


@pytest.mark.slow
def test_cpu_banner_in_a_kernel_is_never_red_stderr(kernel):
    """A kernel renders stderr as a red error box: the not-a-GPU banner is a plain stdout line when the API is
    used without the extension, and a displayed neutral note once `%load_ext scellis_jupyter` is in."""
    r = kernel.run("from scellis_jupyter.backends.device import device\nd = device('reference')")
    assert r["error"] is None, r["error"]
    assert [n for n, t in r["streams"] if "NOT a GPU" in t] == ["stdout"], r["streams"]
    r = kernel.run("%load_ext scellis_jupyter\nimport sys\ndev = sys.modules['scellis_jupyter.backends.device']\n"
                   "dev._CACHE.clear()\n"
                   "d = dev.device('reference')")
    assert r["error"] is None and not [t for _, t in r["streams"] if "NOT a GPU" in t], r
    notes = [d for d in r["data"] if "scellis-note" in d.get("text/html", "")]
    assert len(notes) == 1 and "NOT a GPU (as asked)" in notes[0]["text/plain"]
