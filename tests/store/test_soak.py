"""Soak (issue 12 item 7): 20 kill -9 at random moments of `scellis train/resume` checkpointing every step,
each followed by a whole-store consistency check and a `scellis resume` of the run just killed; the final
weights equal an uninterrupted run's bit for bit (the weights hash, every loss).

Kills are placed by events: each waits for 1-3 new checkpoint rows of the current run, then a random
0-30 ms more (so some land inside a checkpoint write). A run killed before its own first checkpoint is
resumed from the checkpoint it started from (issue 12 item 3).

After each kill `scellis fsck` (store.fsck) must report 0 problems; `store_consistency_problems` also reads
the raw index before anything opens the store (opening drops rows that name missing files, which would
hide a row written before its object).
"""
from __future__ import annotations

import json
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import scellis_jupyter as sc
from scellis_jupyter.store.fsck import fsck
from scellis_jupyter.store import Store
from scellis_jupyter.store.objects import hash_bytes

ROOT = str(Path(sc.__file__).resolve().parent.parent)
STEPS = 200
SPEC = f"""
name = "soak"
[data]
dataset = "synthetic_classification"
n_rows = 600
[model]
nodes = [{{ op = "linear", out = 16 }}, {{ op = "relu" }}, {{ op = "dropout", p = 0.1 }}, {{ op = "linear", out = 2 }}]
[recipe]
optimizer = {{ name = "adamw", lr = 3e-3 }}
scheduler = {{ name = "cosine", warmup_steps = 5 }}
steps = {STEPS}
batch_size = 32
determinism = "debug"
seed = 3
"""


def store_consistency_problems(root: Path) -> list[str]:
    """What `scellis fsck` checks, written here: the raw index (read before Store.open, which drops
    dangling rows) names only files that exist; every object file re-hashes to its name; SQLite's
    integrity check passes; every checkpoint row loads; every run's record and last checkpoint exist."""
    problems = []
    files = {p.parent.name + p.name for p in (root / "objects").glob("*/*") if not p.name.startswith(".tmp-")}
    c = sqlite3.connect(root / "index.sqlite")
    try:
        if c.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            problems.append("index.sqlite: integrity_check failed")
        for table in ("objects", "checkpoints"):
            for (h,) in c.execute(f"SELECT hash FROM {table}"):
                if h not in files:
                    problems.append(f"index {table} row {h[:12]}: no such object file")
        for rid, record, last in c.execute("SELECT id, record, last_checkpoint FROM runs"):
            for what, h in (("record", record), ("last checkpoint", last)):
                if h and h not in files:
                    problems.append(f"run {rid}: its {what} {h[:12]} is not in the store")
        ck_rows = [h for (h,) in c.execute("SELECT hash FROM checkpoints")]
    finally:
        c.close()
    for h in sorted(files):
        if hash_bytes((root / "objects" / h[:2] / h[2:]).read_bytes()) != h:
            problems.append(f"object {h[:12]}: its bytes do not hash to its name")
    s = Store.open(root)
    for h in ck_rows:
        try:
            s.load_checkpoint(h)
        except sc.ScellisError as e:
            problems.append(f"checkpoint {h[:12]}: {e.diagnostic.message}")
    return problems


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
                SCELLIS_DEVICE="reference")


# a fork server: `scellis` runs as cli.main(argv) in a child forked from one process that imported the CLI,
# so a kill does not pay a fresh interpreter's imports (~2 s on a loaded CI machine); each child is a process
# of its own (stdout to /dev/null, stderr to a file), killed by the test and reaped here ("exit <code>")
SERVER = r"""
import json, os, sys, traceback
from scellis_jupyter import cli
for line in sys.stdin:
    err, argv = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            rc = cli.main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(rc)
    print("pid", pid, flush=True)
    print("exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class _Child:
    """One `scellis` run forked by the server: its pid, whether it still runs, its stderr."""

    def __init__(self, server: "_Server", argv: list[str], err: Path):
        self.server, self.err = server, err
        server.proc.stdin.write(json.dumps([str(err), argv]) + "\n")
        server.proc.stdin.flush()
        line = server.lines.get(timeout=60)
        assert line.startswith("pid "), f"fork server: {line!r}"
        self.pid, self.returncode = int(line.split()[1]), None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                line = self.server.lines.get_nowait()
            except queue.Empty:
                return None
            assert line.startswith("exit "), f"fork server: {line!r}"
            self.returncode = int(line.split()[1])
        return self.returncode

    def wait(self, timeout: float) -> int:
        if self.returncode is None:
            line = self.server.lines.get(timeout=timeout)
            assert line.startswith("exit "), f"fork server: {line!r}"
            self.returncode = int(line.split()[1])
        return self.returncode

    def stderr(self) -> str:
        return self.err.read_text() if self.err.exists() else ""


class _Server:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=_env())
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(l) for l in self.proc.stdout], daemon=True).start()

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _newest_run(db: Path, known: set) -> str | None:
    c = sqlite3.connect(db)
    try:
        ids = [r for (r,) in c.execute("SELECT id FROM runs ORDER BY created")]
    except sqlite3.OperationalError:            # the index is being created
        return None
    finally:
        c.close()
    new = [r for r in ids if r not in known]
    return new[-1] if new else None


def _checkpoints_of(db: Path, run: str) -> int:
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT count(*) FROM checkpoints WHERE run = ?", (run,)).fetchone()[0]
    finally:
        c.close()


@pytest.mark.slow
def test_twenty_kills_fsck_resume_bit_identical(tmp_path):
    rnd = random.Random(20261203)
    spec = tmp_path / "soak.toml"
    spec.write_text(SPEC)
    st = tmp_path / "st"
    db = st / "index.sqlite"
    argv = ["train", str(spec), "--checkpoint-every", "1"]
    known: set = set()
    kills = mid_checkpoint_starts = 0
    t0 = time.monotonic()
    server = _Server()
    try:
        while kills < 20:
            p = _Child(server, [*argv, "--store", str(st)], tmp_path / f"stderr{kills}")
            try:
                run = None
                while run is None and p.poll() is None:
                    run = _newest_run(db, known) if db.exists() else None
                    time.sleep(0.005)
                assert run is not None, p.stderr()
                base, want = _checkpoints_of(db, run), rnd.randint(0, 3)
                while _checkpoints_of(db, run) < base + want and p.poll() is None:
                    time.sleep(0.002)
                time.sleep(rnd.uniform(0.0, 0.03))
                assert p.poll() is None, "the run ended before its kill: " + p.stderr()
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
            finally:
                if p.poll() is None:
                    try:
                        os.kill(p.pid, signal.SIGKILL)
                    except ProcessLookupError:            # exited, its exit line not read yet
                        pass
                    p.wait(timeout=30)
            kills += 1
            known.add(run)
            mid_checkpoint_starts += want == 0
            assert store_consistency_problems(st) == [], f"after kill {kills}"
            report = fsck(st)
            assert report.ok and report.problems == [], f"fsck after kill {kills}: {report.problems}"
            runs = Store.open(st).list_runs()
            assert not [r.id for r in runs if r.state == "running"]      # 0 runs left running
            (rec,) = [r for r in runs if r.id == run]
            assert rec.state == "interrupted"
            if rec.last_checkpoint is not None:       # (a resumed run always has one: where it started)
                argv = ["resume", run]
            else:                                     # the very first run, killed before any checkpoint
                assert argv[0] == "train" and rec.resume_hint == "it saved no checkpoint: start it again"
    finally:
        server.close()
    r = subprocess.run([sys.executable, "-m", "scellis_jupyter.cli", *argv, "--store", str(st), "--json"],
                       capture_output=True, text=True, env=_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert store_consistency_problems(st) == []
    assert fsck(st).ok
    whole = sc.train(SPEC, device="reference", progress=False, store=tmp_path / "whole")
    assert got["state"] == "finished" and got["steps"] == STEPS
    assert got["loss_history"] == whole.loss_history and got["weights_hash"] == whole.weights_hash()
    print(f"{kills} kills ({mid_checkpoint_starts} before a first checkpoint could land), "
          f"{time.monotonic() - t0:.1f} s")
