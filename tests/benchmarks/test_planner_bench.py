"""benchmarks/planner.py runs on the reference device: predicted equals measured for every non-red spec."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_planner_benchmark_reference(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "planner.py"), "--devices", "reference", "--no-write"],
                       env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [l.split() for l in r.stdout.splitlines() if l.startswith("reference")]
    assert len(rows) >= 4
    verdicts = {row[1]: row[2] for row in rows}
    assert verdicts["wide-transformer-red"] == "red"
    for row in rows:
        if row[2] != "red":
            assert row[4] == row[6], row          # predicted bytes == measured bytes
            # the host's real peak (tracemalloc) lies within the plan's stated bound for numpy temporaries,
            # on the MLP, CNN, char-transformer and MiniLM (full, LoRA, QLoRA) specs
            line = " ".join(row)
            assert "(tracemalloc," in line and "; within the plan's bound" in line, line
    assert {"digits-mlp", "digits-cnn", "char-transformer", "minilm-l6-lora"} <= set(verdicts)
