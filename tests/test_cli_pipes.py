"""`scellis ... | head`: a command whose stdout reader leaves ends quietly (no BrokenPipeError traceback,
no "Exception ignored" at exit) with exit 141, through real pipes between real processes."""
import os
import subprocess
import sys

import numpy as np
import pytest

from scellis_jupyter.errors import EXIT_BROKEN_PIPE
from scellis_jupyter.store import Store

CLI = [sys.executable, "-m", "scellis_jupyter.cli"]


def closed_reader(args: list[str]) -> tuple[int, str]:
    """Run `scellis args` with stdout a pipe whose read end is already closed: its first write fails."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(CLI + args, stdout=w, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(w)
    return p.returncode, p.stderr


def through_head(args: list[str], n: int = 1) -> tuple[int, str, str]:
    """`scellis args | head -n N` in bash: (the writer's exit status, head's output, the writer's stderr)."""
    cmd = " ".join(f"'{a}'" for a in CLI + args) + f" 2>err.txt | head -{n}; echo \"rc=${{PIPESTATUS[0]}}\""
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300, cwd=os.environ["PIPE_TMP"])
    out = p.stdout.splitlines()
    err = open(os.path.join(os.environ["PIPE_TMP"], "err.txt")).read()
    return int(out[-1].split("=")[1]), "\n".join(out[:-1]), err


@pytest.fixture
def store_with_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPE_TMP", str(tmp_path))
    s = Store.open(tmp_path / "store")
    h = s.start_run(spec_hash="spec", tier="debug")
    for step in range(1, 400):                  # a long `show` listing (checkpoints)
        ck = s.save_checkpoint(weights={"w": np.full(2, step, np.float32)}, optimizer_state={},
                               rng_state={"seed": 0}, epoch=0, step=step, metrics_history={}, spec_hash="spec")
        h.checkpoint(ck, step, 0)
    h.finish()
    return s, h.id


def test_catalog_into_a_closed_pipe_is_quiet():
    rc, err = closed_reader(["catalog"])
    assert rc == EXIT_BROKEN_PIPE and err == "", err


def test_catalog_head_1(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPE_TMP", str(tmp_path))
    rc, out, err = through_head(["catalog"])
    assert out == "optimizer (9)" or out.endswith(")"), out
    assert err == "" and rc in (0, EXIT_BROKEN_PIPE), err


def test_show_head(store_with_run):
    s, run_id = store_with_run
    rc, out, err = through_head(["show", run_id, "--store", str(s.root)], n=3)
    assert out.splitlines()[0].split() == ["run", run_id]
    assert err == "" and rc in (0, EXIT_BROKEN_PIPE), err
    rc, err = closed_reader(["show", run_id, "--store", str(s.root), "--json"])
    assert rc == EXIT_BROKEN_PIPE and err == "", err
    rc, err = closed_reader(["runs", "--store", str(s.root)])
    assert rc == EXIT_BROKEN_PIPE and err == "", err


def test_errors_still_go_to_stderr_with_stdout_closed(tmp_path):
    rc, err = closed_reader(["show", "run-nope", "--store", str(tmp_path / "none")])
    assert rc == 2 and err.startswith("error[")
