"""Crash safety: 50 SIGKILLs at random moments of a child that loops saving ~3 MB checkpoints (resuming
from the store's newest checkpoint each time, so parent chains grow across kills). After every kill:
every object file re-hashes to its name (no half object behind a name), every checkpoint in the index
loads, SQLite's own integrity_check passes, and the run shows as `interrupted`. Tolerance: none.
A fresh store every 10 kills keeps the per-kill verification cheap; the children are forked from one
server process that has done the imports, so a kill does not pay a ~2 s interpreter start (~10 s in all).

The kills are placed by events, not by time (a loaded 2-core machine saves far fewer checkpoints per
second): the child reports each checkpoint it has recorded, and each kill waits for a random number of
them (0-2) before a random extra delay, so every report is a checkpoint that must survive the kill.
"""
import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from scellis_jupyter.store import Store

CHILD = textwrap.dedent("""
    import os
    import sys
    import traceback
    import numpy as np
    from scellis_jupyter.store import Store

    def say(line):
        # one write of the whole line: a child killed mid-print (print writes its pieces apart when unbuffered,
        # PYTHONUNBUFFERED=1) would leave half a line that the server's next line runs into
        os.write(1, (line + "\\n").encode())

    def child(root, seed):
        s = Store.open(root)
        rows = s.index.checkpoints()
        parent = max(rows, key=lambda r: r["created"])["hash"] if rows else None
        step = max((r["step"] for r in rows), default=0)
        run = s.start_run(spec_hash="crash-spec")
        say(f"{os.getpid()} {run.id}")
        rng = np.random.default_rng(seed)
        while True:
            step += 1
            w = {"w": rng.standard_normal(256 * 1024).astype(np.float32)}               # 1 MiB
            opt = {"w": {"m": rng.standard_normal(256 * 1024).astype(np.float32),
                         "v": rng.standard_normal(256 * 1024).astype(np.float32)}}      # 2 MiB
            parent = s.save_checkpoint(weights=w, optimizer_state=opt, rng_state={"seed": 3, "positions": {"init": step}},
                                       epoch=0, step=step, metrics_history={"loss": [[step, 1.0 / step]]},
                                       spec_hash="crash-spec", parent=parent, run=run.id)
            run.checkpoint(parent, step=step, epoch=0)
            say(f"saved {step}")

    # a fork server: the imports (~2 s a process on a loaded CI machine) are paid once, not once per kill;
    # each child is a process of its own, killed by the test, and reaped here ("exit <code>")
    for line in sys.stdin:
        root, seed = line.split()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                child(root, int(seed))
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(1)
        print("exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
""")


class _Lines:
    """The fork server's stdout, line by line, each line waited for at most `timeout` seconds: a protocol that
    falls out of step fails with the lines it saw instead of hanging the suite (it hung once, on a loaded
    machine, in a blocking readline after a kill)."""

    def __init__(self, fd: int, timeout: float = 120.0):
        self.fd, self.timeout, self.buf, self.seen = fd, timeout, b"", []

    def readline(self) -> str:
        end = time.time() + self.timeout
        while b"\n" not in self.buf:
            left = end - time.time()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise AssertionError(f"no line from the fork server in {self.timeout:.0f} s; pending "
                                     f"{self.buf!r}, last lines {self.seen[-8:]}")
            chunk = os.read(self.fd, 65536)
            if not chunk:                                    # the server is gone
                line, self.buf = self.buf, b""
                return line.decode()
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        self.seen.append(line.decode())
        return line.decode() + "\n"


def _check(root, run_id):
    s = Store.open(root)
    assert s.verify() == {}                                  # every named object re-hashes to its name
    for row in s.index.checkpoints():
        c = s.load_checkpoint(row["hash"])                   # verifies manifest, weights, optimizer state
        assert c.step == row["step"]
    c = sqlite3.connect(root / "index.sqlite")
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    c.close()
    rec = s.get_run(run_id)
    assert rec.state == "interrupted", rec.state
    if rec.last_checkpoint:
        assert s.load_checkpoint(rec.last_checkpoint).hash == rec.last_checkpoint
    return s


@pytest.mark.slow
def test_fifty_random_kills(tmp_path):
    rnd = random.Random(1234)
    kills, saved, temps, promised = 0, 0, 0, 0
    t0 = time.time()
    server = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    out = _Lines(server.stdout.fileno())                     # read unbuffered, each line with a deadline
    try:
        for k in range(50):
            root = tmp_path / f"s{k // 10}"
            server.stdin.write(f"{root} {k}\n")
            server.stdin.flush()
            pid, run_id = (out.readline().split() + ["", ""])[:2]
            assert run_id.startswith("run-"), "child failed to start"
            wait_for = rnd.randint(0, 2)                     # checkpoints to see recorded before the kill
            reported = 0
            while reported < wait_for:
                line = out.readline()
                assert line.startswith("saved"), f"child stopped early: {line!r}"
                reported += 1
            time.sleep(rnd.uniform(0.0, 0.1))               # then anywhere, mid-write included
            os.kill(int(pid), signal.SIGKILL)
            line = out.readline()
            while line.startswith("saved"):                  # saved between the last read and the kill
                line = out.readline()
            assert line.startswith("exit"), f"no exit status from the fork server: {line!r}"
            returncode = int(line.split()[1])
            kills += returncode == -signal.SIGKILL
            s = _check(root, run_id)
            mine = len(s.index.checkpoints(run_id))
            assert mine >= reported                          # every checkpoint reported before the kill stays
            saved += mine
            promised += reported
            temps += len(s.objects.temp_files())
            if k % 10 == 9:                                  # gc on a crashed store keeps it loadable
                s.gc(grace_s=0)
                assert s.objects.temp_files() == [] and s.verify() == {}
                last = s.get_run(run_id).last_checkpoint
                if last:
                    s.load_checkpoint(last)
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    print(f"{kills} kills, {saved} checkpoints saved ({promised} reported before a kill), {temps} temp files "
          f"seen, {time.time() - t0:.1f} s")
    assert kills == 50
    assert promised > 0 and saved >= promised                # each reported checkpoint survived its kill
