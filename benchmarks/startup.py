"""Start-up benchmark: seconds from `scellis resume RUN` (or `scellis train SPEC`) starting to the run being in
the store's index (what `scellis runs` lists), and to the process ending; writes a block of RESULTS.md.

    python benchmarks/startup.py                 # reference device, a digits MLP, 5 repeats
    python benchmarks/startup.py --no-write
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
SPEC = ROOT / "benchmarks" / "specs" / "mlp.toml"


def _runs(store: Path) -> int:
    c = sqlite3.connect(store / "index.sqlite")
    try:
        return c.execute("SELECT count(*) FROM runs").fetchone()[0]
    finally:
        c.close()


def _time(argv: list[str], store: Path, env: dict) -> tuple[float, float]:
    """(seconds until a new run row exists, seconds until the process ended)."""
    before, t0 = _runs(store), time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "scellis_jupyter.cli", *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env)
    registered = None
    while p.poll() is None or registered is None:
        if registered is None and _runs(store) > before:
            registered = time.monotonic() - t0
        if p.poll() is not None and registered is None:
            registered = float("nan")
        time.sleep(0.005)
    return registered, time.monotonic() - t0


def main(argv=None) -> int:
    from benchmarks.kernels import write_results
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    env = dict(os.environ, SCELLIS_DEVICE="reference",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        store = Path(d) / "st"
        subprocess.run([sys.executable, "-m", "scellis_jupyter.cli", "train", str(SPEC), "--store", str(store),
                        "--steps", "2", "--json"], env=env, capture_output=True, check=True)
        first = sqlite3.connect(store / "index.sqlite").execute("SELECT id FROM runs").fetchone()[0]
        for name, cmd in (("resume", ["resume", first, "--store", str(store), "--steps", "4"]),
                          ("train", ["train", str(SPEC), "--store", str(store), "--steps", "2"])):
            got = [_time(cmd, store, env) for _ in range(args.repeats)]
            reg, end = [g[0] for g in got], [g[1] for g in got]
            rows.append((name, statistics.median(reg), max(reg), statistics.median(end)))
            print(f"scellis {name}: registered after {statistics.median(reg):.2f} s (median; max {max(reg):.2f}), "
                  f"ended after {statistics.median(end):.2f} s")
    key = "startup @ reference"
    lines = [f"<!-- BEGIN {key} -->", "### start-up on the reference device", "",
             f"- date: {_dt.date.today().isoformat()}; {os.cpu_count()} CPUs; {args.repeats} repeats; spec "
             f"`benchmarks/specs/mlp.toml` (built-in digits: loading it imports scikit-learn, ~2 s)",
             "- registered: from the process starting to its run row in the index (`scellis runs` lists it); "
             "target (issue 12 item 6): under 1 s", "",
             "| command | registered, median s | registered, max s | ended, median s |", "|---|---:|---:|---:|"]
    lines += [f"| scellis {n} | {r:.2f} | {m:.2f} | {e:.2f} |" for n, r, m, e in rows]
    lines += ["", f"<!-- END {key} -->"]
    if not args.no_write:
        write_results([(key, "\n".join(lines))])
        print("wrote benchmarks/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
