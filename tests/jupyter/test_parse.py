"""Magic-line parsing without a kernel: options, sizes, help, mistakes, and spec diagnostics moved to cell lines."""
from __future__ import annotations

import pytest

from scellis_jupyter.errors import Diagnostic
from scellis_jupyter.jupyter.parse import (SUBCOMMANDS, MagicError, cell_diagnostic, parse_cell_header, parse_line,
                                           usage)


def test_train_options():
    c = parse_line("train mlp --steps 200 --checkpoint-every 50 --tier prod --memory 8GiB --wait")
    assert (c.sub, c.name, c.steps, c.checkpoint_every, c.tier, c.memory, c.wait) == \
        ("train", "mlp", 200, 50, "prod", 8 * 2**30, True)
    assert parse_line("train mlp").steps is None


def test_quoted_words_lose_their_quotes():
    assert parse_line("runs --store '/tmp/my store'").store == "/tmp/my store"


@pytest.mark.parametrize("line, words", [
    ("train mlp --steps 0", "must be at least 1"),
    ("train mlp --steps x", "not an integer"),
    ("train", "the following arguments are required: name"),
    ("train mlp --tier best", "invalid choice: 'best'"),
    ("plan mlp --memory much", "not a size"),
    ("stpo mlp", "did you mean 'stop'"),
    ("train 'a b'", "is not a model handle"),
    ("runs --store 'x", "close the quote"),
])
def test_mistakes_are_magic_errors(line, words):
    with pytest.raises(MagicError) as e:
        parse_line(line)
    assert words in e.value.diagnostic.format()


def test_help():
    assert parse_line("").help == usage() == parse_line("--help").help
    assert set(SUBCOMMANDS) <= set(usage().split())
    h = parse_line("train --help").help
    assert "--steps" in h and "--checkpoint-every" in h
    assert parse_line("help verify").help.startswith("usage: %scellis verify")


def test_cell_headers():
    h = parse_cell_header("mlp --no-plan")
    assert (h.mode, h.name, h.options) == ("spec", "mlp", {"no_plan": True})
    h = parse_cell_header("catalog optimizer my_sgd")
    assert (h.mode, h.kind, h.name) == ("catalog", "optimizer", "my_sgd")
    for line, words in (("", "needs a NAME"), ("2fast", "not a Python name"), ("mlp --no-plna", "did you mean"),
                        ("catalog optimizer", "needs a KIND and a NAME")):
        with pytest.raises(MagicError) as e:
            parse_cell_header(line)
        assert words in e.value.diagnostic.format()


def test_cell_diagnostic_moves_to_the_cell_line():
    body = 'name = "x"\n[model]\nnodes = [{ op = "linaer" }]\n'
    d = cell_diagnostic(Diagnostic("spec", "unknown op 'linaer'", "<cell m>:3:17", "did you mean 'linear'?"),
                        "<cell m>", "m", body)
    assert d.where == "cell m, line 4, column 17"
    cell = ("%%scellis m\n" + body).split("\n")
    assert cell[4 - 1][17 - 1:].startswith('"linaer"')
    assert '   4 | nodes = [{ op = "linaer" }]' in d.message and d.message.endswith(" " * 16 + "^")
    other = Diagnostic("data", "x", "somewhere else")
    assert cell_diagnostic(other, "<cell m>", "m", body) is other
