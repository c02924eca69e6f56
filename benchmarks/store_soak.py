"""Store soak (issue 36's audit as a rerunnable script): SIGKILLs at random moments, then a tamper matrix.

Part 1, kills: `scellis train` (then `scellis resume` of the run just killed) checkpointing every step on a
temp store, each child forked from this process (no interpreter start per kill) and killed with SIGKILL
after 0-3 new checkpoints plus 0-30 ms (some kills land inside an object or WAL write). After each kill
`scellis fsck` runs; counted: corrupt objects, phantom `running` rows, failed resumes (a resume that exits
with an error before its kill), fsck problems of any kind. The last resume runs to its end.

Part 2, tampering: one copy of a killed store (its WAL left as the kill left it) per tamper class, and
one receipt ledger and one privacy ledger per ledger class; prints tamper class -> detected and the
checking command's exit code (fsck, `scellis ledger verify`, or opening the privacy ledger), and writes
the section "store soak" of benchmarks/RESULTS.md.

    python benchmarks/store_soak.py                 # 20 kills + 18 tamper classes, ~20-60 s on 2 cores
    python benchmarks/store_soak.py --kills 50 --no-write
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import queue
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
os.environ["SCELLIS_DEVICE"] = "reference"

from scellis_jupyter import cli  # noqa: E402
from scellis_jupyter.store import Store  # noqa: E402
from scellis_jupyter.store.fsck import fsck  # noqa: E402

SPEC = """
name = "soak"
[data]
dataset = "synthetic_classification"
n_rows = 400
[model]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { op = "linear", out = 2 }]
[recipe]
optimizer = { name = "adamw", lr = 3e-3 }
steps = %d
batch_size = 32
determinism = "debug"
seed = 3
"""


# ---- children ------------------------------------------------------------------------------------------
# A fork server: one process that imported the CLI (and never opened a store: SQLite connections must not
# cross a fork) forks each `scellis` child, so a kill does not pay an interpreter start; it says "pid N"
# for each child and "exit N" when that child ends.
SERVER = r"""
import json, os, sys
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
        except BaseException:
            pass
        finally:
            os._exit(rc if isinstance(rc, int) else 1)
    print("pid", pid, flush=True)
    print("exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class Server:
    def __init__(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(ln) for ln in self.proc.stdout], daemon=True).start()

    def start(self, argv: list[str], err: Path) -> "Child":
        self.proc.stdin.write(json.dumps([str(err), argv]) + "\n")
        self.proc.stdin.flush()
        line = self.lines.get(timeout=60)
        assert line.startswith("pid "), line
        return Child(self, int(line.split()[1]))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class Child:
    def __init__(self, server: Server, pid: int):
        self.server, self.pid, self.rc = server, pid, None

    def poll(self) -> int | None:
        """The exit code once it ended (negative: killed by that signal), else None."""
        if self.rc is None:
            try:
                line = self.server.lines.get_nowait()
            except queue.Empty:
                return None
            self.rc = int(line.split()[1])
        return self.rc

    def kill(self) -> int:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.rc = int(self.server.lines.get(timeout=60).split()[1])
        return self.rc


def _rows(db: Path, sql: str, args=()) -> list:
    try:
        c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return c.execute(sql, args).fetchall()
        finally:
            c.close()
    except sqlite3.Error:
        return []


def _count(db: Path, run: str) -> int:
    return len(_rows(db, "SELECT hash FROM checkpoints WHERE run = ?", (run,)))


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


# ---- part 1: kills -------------------------------------------------------------------------------------
def kill_soak(server: Server, tmp: Path, kills: int, steps: int, rnd: random.Random) -> dict:
    spec = tmp / "soak.toml"
    spec.write_text(SPEC % steps)
    st = tmp / "kills"
    db = st / "index.sqlite"
    argv = ["train", str(spec), "--checkpoint-every", "1"]
    known: set = set()
    res = {"kills": 0, "corrupt_objects": 0, "phantom_running": 0, "failed_resumes": 0, "fsck_problems": 0,
           "fsck_nonzero": 0, "before_first_checkpoint": 0, "final": ""}
    for k in range(kills):
        err = tmp / f"err{k}"
        child = server.start([*argv, "--store", str(st)], err)
        run = None
        t0 = time.monotonic()
        while run is None and child.poll() is None and time.monotonic() - t0 < 120:
            ids = [r for (r,) in _rows(db, "SELECT id FROM runs ORDER BY created") if r not in known]
            run = ids[-1] if ids else None
            time.sleep(0.005)
        if run is not None and child.poll() is None:
            base, want = _count(db, run), rnd.randint(0, 3)
            while child.poll() is None and _count(db, run) < base + want:
                time.sleep(0.002)
            time.sleep(rnd.uniform(0.0, 0.03))
            res["before_first_checkpoint"] += want == 0
        rc = child.kill()
        res["kills"] += rc == -signal.SIGKILL
        if rc not in (-signal.SIGKILL, 0) and argv[0] == "resume":
            res["failed_resumes"] += 1
            print(f"kill {k}: resume exited {rc}: {err.read_text()[-300:]}", file=sys.stderr)
        rep = fsck(st)
        res["fsck_problems"] += len(rep.problems)
        res["fsck_nonzero"] += not rep.ok
        res["corrupt_objects"] += sum(p.kind == "corrupt-object" for p in rep.problems)
        for p in rep.problems:
            print(f"kill {k}: fsck: {p.kind} {p.subject} {p.detail}", file=sys.stderr)
        runs = Store.open(st).list_runs()
        res["phantom_running"] += sum(r.state == "running" for r in runs)
        if run is not None:
            known.add(run)
            rec = next((r for r in runs if r.id == run), None)
            if rc == 0:
                break
            if rec is not None and rec.last_checkpoint is not None:
                argv = ["resume", run]
    rc, _, _ = run_cli([*argv, "--store", str(st), "--json"])
    res["final"] = f"{argv[0]} to the end: exit {rc}"
    if rc != 0:
        res["failed_resumes"] += argv[0] == "resume"
    res["fsck_after_final"] = "ok" if fsck(st).ok else "problems"
    return res


# ---- part 2: tampering ---------------------------------------------------------------------------------
def killed_base(server: Server, tmp: Path, steps: int) -> tuple[Path, str]:
    """A store whose training child was killed after 6 checkpoints: its WAL is left non-empty."""
    spec = tmp / "base.toml"
    spec.write_text(SPEC % steps)
    st = tmp / "base"
    child = server.start(["train", str(spec), "--checkpoint-every", "1", "--store", str(st)], tmp / "base.err")
    db, t0 = st / "index.sqlite", time.monotonic()
    while time.monotonic() - t0 < 120 and child.poll() is None:
        if db.exists() and len(_rows(db, "SELECT hash FROM checkpoints")) >= 6:
            break
        time.sleep(0.005)
    child.kill()
    (run,) = _rows(db, "SELECT id FROM runs")[0]
    return st, run


def _flip(p: Path, at: int | None = None) -> None:
    b = bytearray(p.read_bytes())
    b[len(b) // 2 if at is None else at] ^= 0xFF
    p.write_bytes(bytes(b))


def _halve(p: Path) -> None:
    os.truncate(p, p.stat().st_size // 2)


def _sql(st: Path, sql: str) -> None:
    c = sqlite3.connect(st / "index.sqlite")
    c.execute(sql)
    c.commit()
    c.close()


def _objects(st: Path) -> dict:
    """The last checkpoint's manifest and weights, and the run's current record, as paths."""
    (run, rec, last), = _rows(st / "index.sqlite", "SELECT id, record, last_checkpoint FROM runs")
    path = lambda h: st / "objects" / h[:2] / h[2:]            # noqa: E731
    m = json.loads(path(last).read_bytes())
    return {"manifest": path(last), "weights": path(m["weights"]), "record": path(rec)}


STORE_TAMPERS = {
    "object: flip a byte (weights)": lambda st: _flip(_objects(st)["weights"]),
    "object: truncate (manifest)": lambda st: os.truncate(_objects(st)["manifest"], 40),
    "object: zero (run record)": lambda st: (lambda p: p.write_bytes(bytes(p.stat().st_size)))(_objects(st)["record"]),
    "object: delete (weights)": lambda st: os.unlink(_objects(st)["weights"]),
    "index: edit a run id": lambda st: _sql(st, "UPDATE runs SET id = 'run-20000101-000000-abcdef'"),
    "index: state set to failed": lambda st: _sql(st, "UPDATE runs SET state = 'failed'"),
    "index: delete checkpoint rows": lambda st: _sql(st, "DELETE FROM checkpoints"),
    "index: delete object rows": lambda st: _sql(st, "DELETE FROM objects"),
    "index: append 4 KiB junk": lambda st: open(st / "index.sqlite", "ab").write(os.urandom(4096)),
    "WAL: delete": lambda st: os.unlink(st / "index.sqlite-wal"),
    "WAL: flip a header byte": lambda st: _flip(st / "index.sqlite-wal", 17),
    "WAL: truncate to half": lambda st: _halve(st / "index.sqlite-wal"),
}


def tamper_store(tmp: Path, base: Path) -> list[tuple[str, bool, int, str]]:
    out = []
    for name, tamper in STORE_TAMPERS.items():
        st = tmp / "t" / name.replace(" ", "_").replace(":", "").replace("(", "").replace(")", "")
        shutil.copytree(base, st)
        tamper(st)
        rc, text, _ = run_cli(["fsck", "--json", "--store", str(st)])
        kinds = sorted({p["kind"] for p in json.loads(text)["problems"]})
        rrc = run_cli(["fsck", "--repair", "--store", str(st)])[0]
        after = run_cli(["fsck", "--store", str(st)])[0]
        out.append((name, rc != 0, rc, f"fsck: {', '.join(kinds) or 'ok'}; `fsck --repair` exit {rrc}, "
                    f"then fsck exit {after}"))
    return out


def _untrigger(c: sqlite3.Connection) -> None:
    """A hostile editor first drops the append-only triggers."""
    for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        c.execute(f"DROP TRIGGER {name}")


def tamper_ledgers(tmp: Path) -> list[tuple[str, bool, int, str]]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from scellis_jupyter.errors import ScellisError
    from scellis_jupyter.federated.privacy import PrivacyLedger, entry_hash
    from scellis_jupyter.pool import keys
    from scellis_jupyter.pool.ledger import Ledger, _head_text
    os.environ["SCELLIS_KEY_DIR"] = str(tmp / "keys")
    other = Ed25519PrivateKey.generate()
    out = []

    def receipts(name: str) -> Path:
        p = tmp / "ledgers" / name / "ledger.sqlite"
        p.parent.mkdir(parents=True)
        led = Ledger(p)
        for i in range(5):
            led.mint(job=f"j{i}", shard=f"s{i}", peer="w", result=f"r{i}", method="rerun", work_units=1)
        led.close()
        return p

    def resign(p: Path, drop: int) -> None:
        c = sqlite3.connect(p)
        _untrigger(c)
        c.execute("DELETE FROM receipts WHERE seq > (SELECT max(seq) FROM receipts) - ?", (drop,))
        for seq, h in c.execute("SELECT seq, hash FROM receipts").fetchall():
            c.execute("UPDATE receipts SET signature = ? WHERE seq = ?", (other.sign(h.encode()), seq))
        row = c.execute("SELECT seq, hash FROM receipts ORDER BY seq DESC LIMIT 1").fetchone() or (0, "0" * 64)
        c.execute("UPDATE meta SET value = ? WHERE key = 'public_key'", (keys.public_hex(other),))
        c.execute("UPDATE meta SET value = ? WHERE key = 'head'",
                  (json.dumps([row[0], row[1], other.sign(_head_text(*row)).hex()]),))
        c.commit()
        c.close()

    def drop_last(p: Path) -> None:
        c = sqlite3.connect(p)
        _untrigger(c)
        c.execute("DELETE FROM receipts WHERE seq = (SELECT max(seq) FROM receipts)")
        c.commit()
        c.close()

    for name, tamper in (("receipts: drop the last receipt", drop_last),
                         ("receipts: drop the last, re-sign all with another key", lambda p: resign(p, 1)),
                         ("receipts: re-sign all with another key", lambda p: resign(p, 0))):
        p = receipts(name.split(": ")[1].replace(" ", "_").replace(",", ""))
        tamper(p)
        rc, text, err = run_cli(["ledger", "verify", str(p)])
        said = (err.strip().splitlines() or text.strip().splitlines() or [""])[0]
        out.append((name, rc != 0, rc, "ledger verify: " + said.split("ledger.sqlite: ", 1)[-1][:100]))

    def privacy(name: str) -> Path:
        p = tmp / "ledgers" / f"{name}.jsonl"
        led = PrivacyLedger(10.0, 1e-5, p)
        for _ in range(4):
            led.charge(1.1)
        return p

    def lines_resigned(p: Path) -> None:
        prev, rows = "0" * 64, []
        for i, line in enumerate(p.read_text().splitlines(), start=1):
            e = dict(json.loads(line), signer=keys.public_hex(other), prev=prev, seq=i)
            e["hash"] = entry_hash(e)
            e["signature"] = other.sign(e["hash"].encode()).hex()
            rows.append(json.dumps(e, sort_keys=True))
            prev = e["hash"]
        p.write_text("\n".join(rows) + "\n")

    drop_line = lambda p: p.write_text("".join(p.read_text().splitlines(True)[:-1]))      # noqa: E731
    for name, tamper in (("privacy: drop the last line", drop_line),
                         ("privacy: drop every line", lambda p: p.write_text("")),
                         ("privacy: re-sign every line with another key", lines_resigned)):
        p = privacy(name.split(": ")[1].replace(" ", "_"))
        tamper(p)
        try:
            PrivacyLedger(10.0, 1e-5, p)
            out.append((name, False, 0, "opened; the budget would be spent again"))
        except ScellisError as e:
            out.append((name, True, 2, f"refused on open: {e.diagnostic.message[:100]}"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs of train/resume children (20)")
    ap.add_argument("--steps", type=int, default=300, help="steps of the soak's recipe (300)")
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        server = Server()
        try:
            k = kill_soak(server, tmp, args.kills, args.steps, random.Random(args.seed))
            base, _ = killed_base(server, tmp, args.steps)
        finally:
            server.close()
        table = tamper_store(tmp, base) + tamper_ledgers(tmp)
    secs = time.monotonic() - t0
    lines = [f"{k['kills']} SIGKILLs of `scellis train`/`resume` (checkpoint every step, "
             f"{k['before_first_checkpoint']} before a new checkpoint could land), `fsck` after each: "
             f"{k['corrupt_objects']} corrupt objects, "
             f"{k['phantom_running']} phantom running rows, {k['failed_resumes']} failed resumes, "
             f"{k['fsck_problems']} fsck problems ({k['fsck_nonzero']} non-zero exits); {k['final']}, then fsck "
             f"{k['fsck_after_final']}.",
             "", f"Tamper matrix ({sum(d for _, d, _, _ in table)} of {len(table)} detected; {secs:.0f} s in all):", "",
             "| tamper class | detected | exit | what said it |", "|---|---|---|---|"]
    lines += [f"| {n} | {'yes' if d else 'NO'} | {rc} | {why.replace('|', '/')} |" for n, d, rc, why in table]
    print("\n".join(lines))
    if not args.no_write:
        from benchmarks.kernels import write_results
        key = "store soak"
        block = (f"<!-- BEGIN {key} -->\n### {key}\n\nWritten by `benchmarks/store_soak.py` (seed {args.seed}, "
                 f"{args.kills} kills, {os.cpu_count()} cores, SCELLIS_DEVICE=reference; "
                 f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC). Exit: the checking command's "
                 "(`scellis fsck`, `scellis ledger verify`; 2 for a privacy ledger refused on open).\n\n"
                 + "\n".join(lines) + f"\n<!-- END {key} -->")
        write_results([(key, block)])
    ok = all(d for _, d, _, _ in table) and not (k["corrupt_objects"] or k["phantom_running"] or k["failed_resumes"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
