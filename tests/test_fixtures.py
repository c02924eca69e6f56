"""The fixtures loader: spec texts from tests/fixtures/specs, changed one line at a time."""
import tomllib

import pytest

from fixtures import entry_source, spec_path, spec_text


def test_spec_text_replaces_exactly_the_named_top_level_lines():
    base = spec_text("blocks")
    assert base == spec_path("blocks").read_text()
    changed = spec_text("blocks", batch_size=8, optimizer={"name": "adafactor", "lr": 1e-2, "beta1": 0.9},
                        determinism="fast", clip_grad_norm=False)
    got, want = tomllib.loads(changed), tomllib.loads(base)
    assert got["recipe"]["batch_size"] == 8 and want["recipe"]["batch_size"] == 16
    assert got["recipe"]["optimizer"] == {"name": "adafactor", "lr": 1e-2, "beta1": 0.9}
    assert got["recipe"]["determinism"] == "fast" and got["recipe"]["clip_grad_norm"] is False
    assert got["model"] == want["model"] and got["data"] == want["data"]
    assert len(changed.splitlines()) == len(base.splitlines())


def test_a_change_that_matches_no_line_or_several_is_refused():
    with pytest.raises(KeyError, match="0 lines 'epochs = ...'"):
        spec_text("blocks", epochs=3)
    with pytest.raises(KeyError, match="0 lines 'metrics = ...'"):
        spec_text("blocks", metrics=["accuracy"])
    with pytest.raises(KeyError, match="0 lines 'op = ...'"):          # inside the node tables, not a line start
        spec_text("blocks", op="relu")


def test_entry_source_fills_its_fields():
    src = entry_source("user_sgd", name="my_sgd", buf_shape="shape")
    assert '@optimizer("my_sgd"' in src and "{" not in src.split("params=")[0]
    compile(src, "<user_sgd>", "exec")
