"""Spec fuzzing: mutate every spec under benchmarks/specs/ and run `scellis plan` on each mutant, in-process.

Why: a user's spec file is arbitrary bytes; whatever it holds, `scellis plan` must answer with a plan
(exit 0/3) or a diagnostic (exit 2, `error[...]`), never a Python traceback. The mutators are the ones
issue 12 used (deleted lines, swapped types, extreme numbers, junk bytes, nesting, truncation) plus
paths that break dataset readers (long names, directories, non-UTF-8 files). The property-based test
(tests/spec/test_spec_fuzz.py) draws from the same mutators through hypothesis.

    python benchmarks/fuzz_specs.py               # 1,040 mutants (seed 0); writes a block of RESULTS.md
    python benchmarks/fuzz_specs.py -n 200 --no-write
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import random
import re
import signal
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
SPECS = Path(__file__).resolve().parent / "specs"

# ---- mutators: (spec bytes, random.Random) -> mutant bytes ---------------------------------------------
_VALUE = re.compile(rb"(=\s*)(\"[^\"\n]*\"|'[^'\n]*'|true|false|[-+]?[0-9][0-9_.eE+\-]*|inf|nan|\[[^\n]*\]|\{[^\n]*\})")
_NUMBER = re.compile(rb"(?<![\w.\"])[-+]?[0-9][0-9_]*(\.[0-9]+)?([eE][-+]?[0-9]+)?(?![\w\"])")
_STRING = re.compile(rb"\"[^\"\n]*\"")

TYPED_VALUES = [b'"text"', b'""', b"0", b"-1", b"1.5", b"true", b"false", b"[]", b"[1, 2]", b'["a"]', b"{}",
                b'{ name = "x" }', b"1979-05-27T07:32:00Z", b"07:32:00", b"[[1], [2]]", b"[{}]"]
EXTREME_NUMBERS = [b"0", b"-0", b"-1", b"1e308", b"-1e308", b"1e-320", b"inf", b"-inf", b"nan", b"+inf",
                   b"9223372036854775807", b"-9223372036854775808", b"18446744073709551616", b"9" * 400,
                   b"0.0", b"1e-30", b"4294967296", b"65536", b"0x7fffffff", b"0b1", b"2147483648", b"9" * 5000, b"0x" + b"f" * 4500]
PATHS = [b'"/tmp"', b'"/etc/passwd"', b'"' + b"a" * 300 + b'"', b'"' + b"x/" * 2100 + b'"', b'"."', b'".."',
         b'"/dev/null"', b'"/nonexistent/file.csv"', b'"/proc/self/status"', b'"\\u0000"', b'"~"',
         b'"/etc/passwd.csv"', b'"package:"', b'"package:nope/x"', b'"package:scellis_jupyter/"']
JUNK = [b"\x00", b"\xff", b"\xfe\xff", b"\xef\xbb\xbf", b"\xc3", b"\x80\x80", b"\xed\xa0\x80", b"\x1b[31m", b"\r",
        b"\t", b"\\", b'"', b"'''", b"[", b"]]", b"{", b"=", b"#", b"\n[", b"\xf4\x90\x80\x80", b'"\\ud800"', b"\\uDFFF"]


def delete_lines(text: bytes, r: random.Random) -> bytes:
    lines = text.split(b"\n")
    for _ in range(r.randint(1, 3)):
        if len(lines) > 1:
            del lines[r.randrange(len(lines))]
    return b"\n".join(lines)


def _replace_match(text: bytes, pattern: re.Pattern, r: random.Random, new: bytes, group: int = 0) -> bytes:
    ms = list(pattern.finditer(text))
    if not ms:
        return text + b"\nx = " + new
    m = r.choice(ms)
    a, b = m.span(group)
    return text[:a] + new + text[b:]


def swap_type(text: bytes, r: random.Random) -> bytes:
    return _replace_match(text, _VALUE, r, r.choice(TYPED_VALUES), group=2)


def extreme_number(text: bytes, r: random.Random) -> bytes:
    return _replace_match(text, _NUMBER, r, r.choice(EXTREME_NUMBERS))


def bad_path(text: bytes, r: random.Random) -> bytes:
    """A string value (the dataset, a tokenizer, a file) replaced by a path that breaks readers."""
    if r.random() < 0.5 and b"dataset" in text:
        return re.sub(rb"dataset\s*=\s*\"[^\"\n]*\"", lambda m: b"dataset = " + r.choice(PATHS), text, count=1)
    return _replace_match(text, _STRING, r, r.choice(PATHS))


def junk_bytes(text: bytes, r: random.Random) -> bytes:
    kind = r.randrange(5)
    if kind == 0:                                 # the whole file in another encoding
        # (latin-1 cannot hold every character an earlier mutation left: those become '?')
        enc = r.choice(["utf-16-le", "utf-16-be", "utf-32", "latin-1"])
        return r.choice([b"\xff\xfe", b"\xfe\xff", b""]) + text.decode("utf-8", "replace").encode(enc, "replace")
    if kind == 1:                                 # random binary
        return bytes(r.randrange(256) for _ in range(r.randint(1, 300)))
    if kind == 2:                                 # a byte-order mark in front (valid spec otherwise)
        return b"\xef\xbb\xbf" + text
    out = bytearray(text)
    for _ in range(r.randint(1, 4)):
        i = r.randrange(len(out) + 1)
        out[i:i] = r.choice(JUNK) if kind == 3 else bytes([r.randrange(256)])
    return bytes(out)


def nesting(text: bytes, r: random.Random) -> bytes:
    depth = r.choice([5, 50, 200, 330, 1000, 5000])
    if r.random() < 0.5:
        new = b"[" * depth + b"1" + b"]" * depth
    else:
        new = b"{ a = " * depth + b"1" + b" }" * depth
    if r.random() < 0.2:                          # unbalanced
        new = new[: len(new) // 2]
    return _replace_match(text, _VALUE, r, new, group=2)


def truncate(text: bytes, r: random.Random) -> bytes:
    return text[: r.randrange(len(text) + 1)]


MUTATORS = {"delete_lines": delete_lines, "swap_type": swap_type, "extreme_number": extreme_number,
            "junk_bytes": junk_bytes, "nesting": nesting, "truncate": truncate, "bad_path": bad_path}


def mutate(text: bytes, kind: str, seed: int) -> bytes:
    """One mutant of `text` (deterministic in kind and seed); 1-2 extra mutations stacked sometimes."""
    r = random.Random(f"{kind}:{seed}")
    out = MUTATORS[kind](text, r)
    if r.random() < 0.15:
        out = MUTATORS[r.choice(sorted(MUTATORS))](out, r)
    return out


# ---- running one mutant through `scellis plan` ----------------------------------------------------------
class _Timeout(Exception):
    pass


def plan_outcome(data: bytes, folder: str | os.PathLike, timeout_s: int = 20) -> tuple[str, str]:
    """('plan' | 'diagnostic' | 'traceback' | 'timeout', detail) for `scellis plan` on a file holding `data`.

    The file is written into `folder` (relative paths in the spec start there); cli.main runs in this
    process, so a traceback is an exception that escaped it.
    """
    from scellis_jupyter import cli
    fd, path = tempfile.mkstemp(suffix=".toml", dir=folder)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_):
        raise _Timeout

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["plan", path])
    except _Timeout:
        return "timeout", f"over {timeout_s} s"
    except BaseException as e:                          # what a user would see as a traceback
        tb = traceback.extract_tb(e.__traceback__)
        last = tb[-1] if tb else None
        site = f"{Path(last.filename).name}:{last.lineno} ({last.name})" if last else "?"
        return "traceback", f"{type(e).__name__} at {site}: {str(e)[:120]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.unlink(path)
    text = err.getvalue()
    if rc in (0, 3):
        return "plan", f"exit {rc}"
    if rc == 2 and text.lstrip().startswith("error[") and "Traceback" not in text:
        return "diagnostic", text.splitlines()[0][:160]
    return "traceback", f"exit {rc}: {text[-300:]}"


def specs() -> list[Path]:
    return sorted(SPECS.glob("*.toml"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=1040, help="number of mutants (spread over specs and mutators)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--label", default="", help="a word for the RESULTS.md block (e.g. before / after)")
    args = ap.parse_args(argv)
    os.environ.setdefault("SCELLIS_DEVICE", "reference")
    files, kinds = specs(), sorted(MUTATORS)
    counts: collections.Counter = collections.Counter()
    causes: collections.Counter = collections.Counter()
    by_kind: dict = collections.defaultdict(collections.Counter)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.n):
            f, kind = files[i % len(files)], kinds[(i // len(files)) % len(kinds)]
            outcome, detail = plan_outcome(mutate(f.read_bytes(), kind, args.seed * 100003 + i), tmp)
            counts[outcome] += 1
            by_kind[kind][outcome] += 1
            if outcome in ("traceback", "timeout"):
                causes[re.sub(r":\d+", "", detail.split(": ", 1)[0])] += 1
                print(f"{outcome:10} {f.name:22} {kind:15} {detail}", file=sys.stderr)
    total = sum(counts.values())
    lines = [f"{args.n} mutants of {len(files)} specs (seed {args.seed}): " +
             ", ".join(f"{counts[k]} {k}" for k in ("diagnostic", "plan", "traceback", "timeout"))]
    lines += ["", "| mutator | diagnostic | plan | traceback | timeout |", "|---|---|---|---|---|"]
    for k in kinds:
        c = by_kind[k]
        lines.append(f"| {k} | {c['diagnostic']} | {c['plan']} | {c['traceback']} | {c['timeout']} |")
    if causes:
        lines += ["", "Tracebacks by cause:"] + [f"- {n} x {c}" for c, n in causes.most_common()]
    print("\n".join(lines))
    if not args.no_write:
        from benchmarks.kernels import write_results
        key = f"spec fuzz{(' ' + args.label) if args.label else ''}"
        block = (f"<!-- BEGIN {key} -->\n### {key}\n\nWritten by `benchmarks/fuzz_specs.py` "
                 f"(`scellis plan` in-process, SCELLIS_DEVICE=reference).\n\n" + "\n".join(lines) + f"\n<!-- END {key} -->")
        write_results([(key, block)])
    return 0 if counts["traceback"] == counts["timeout"] == 0 and total else 1


if __name__ == "__main__":
    sys.exit(main())
