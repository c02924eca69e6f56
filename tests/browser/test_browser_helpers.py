"""The browser tests share one "run a cell, retrying a lost Shift+Enter" helper (conftest.run_cell): a fix to
that flakiness cure then reaches every test. No other module sends Shift+Enter itself."""
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_only_conftest_sends_shift_enter():
    senders = sorted(p.name for p in HERE.glob("*.py") if p.name != Path(__file__).name
                     and 'press("Shift+Enter")' in p.read_text())
    assert senders == ["conftest.py"], senders
