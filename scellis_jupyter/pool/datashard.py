"""Shards that travel as data: a Program IR, its inputs' bytes and hashes, run by the peer's own interpreter.

Why: Dask runs whatever pickled code a client sends, so a peer that is not ours (a partner lab, a stranger)
must never be sent a Python callable. A data shard is a byte string: a JSON header (the op graph in the
Program IR's terms, each input's dtype, shape, BLAKE3 hash and place) and the inputs' raw bytes. The peer
parses it without pickle, rebuilds every value through its own op set's shape and dtype inference, compiles
it with its own compiler and runs it on its own numpy reference interpreter, under a guard that refuses
every effect (no file, socket, process, import) for the thread running it: there are no effect grants.
The answer comes back the same way, stamped with the attempt it answers (a replayed answer is stale).
"""
from __future__ import annotations

import json
import struct
import sys
import threading
from typing import Any, Callable

import blake3
import numpy as np

from .. import dtypes as dt, settings
from .._version import __version__
from ..determinism import TIERS
from ..errors import RejectedResult, ScellisError, ShardRefused, did_you_mean
from ..graph.node import Node, toposort
from ..graph.opset import OPS, make
from .job import program_id

FORMAT = "scellis-data-shard/1"
SHARD_MAGIC, RESULT_MAGIC = b"SCSHARD1", b"SCRESLT1"
MAX_HEADER = 8 << 20                                        # a header (the op graph) of at most 8 MiB
INTERPRETER_OPS = frozenset(OPS) - {"placeholder", "const"}  # leaves are the shard's own inputs, by name
_SHARD_KEYS = {"format", "engine", "stamp", "tier", "program", "inputs", "outputs"}
_INPUT_KEYS = {"name", "dtype", "shape", "hash", "offset", "nbytes"}
_WHERE = "data shard"


# ---- the effect guard: nothing but compute on the thread running a shard -----------------------------
_DENY = ("open", "import", "exec", "compile", "os.", "socket.", "subprocess.", "shutil.", "ctypes.", "_thread.",
         "urllib.", "http.", "ftplib.", "smtplib.", "poplib.", "imaplib.", "nntplib.", "telnetlib.", "glob.",
         "tempfile.", "sqlite3.", "pickle.", "marshal.", "mmap.", "fcntl.", "pty.", "resource.", "syslog.",
         "webbrowser.", "winreg.", "msvcrt.", "code.__new__", "function.__new__", "sys.settrace",
         "sys.setprofile", "sys.addaudithook", "cpython.run_")
_GUARD = threading.local()
_HOOKED = False
_HOOK_LOCK = threading.Lock()


def _audit(event: str, args: tuple) -> None:
    if getattr(_GUARD, "on", False) and (event == "open" or event.startswith(_DENY)):
        _GUARD.on = False                      # the refusal below must not itself be refused
        what = f"{event} {args[0]!r}" if args else event
        raise ShardRefused(f"a data shard attempted an effect ({what[:120]}): it has no file, network, process "
                           "or import grant", where=_WHERE, hint="a shard computes on its inputs only",
                           effect=event)


class no_effects:
    """`with no_effects():` the current thread may compute but not open, connect, spawn or import."""

    def __enter__(self):
        global _HOOKED
        with _HOOK_LOCK:
            if not _HOOKED:                    # one process-wide hook (hooks cannot be removed), per-thread switch
                sys.addaudithook(_audit)
                _HOOKED = True
        _GUARD.on = True
        return self

    def __exit__(self, *exc) -> None:
        _GUARD.on = False


# ---- the client side: a Program built from a function of placeholders --------------------------------
class DataProgram:
    """A shard program that travels as data: `build(*inputs, **params)` receives graph placeholders (one per
    payload array; a dict payload's by keyword) and returns a Node, or a list or dict of Nodes, built with
    `scellis_jupyter.graph.functional`. It is traced on the client only; peers get the op graph.

    Calling it (`prog(payload, **params)`) runs the shard locally through the very path a peer uses, which is
    the reference a result is checked against.
    """

    def __init__(self, build: Callable, *, tier: str = "debug", name: str = ""):
        if tier not in TIERS:
            raise ShardRefused(f"unknown determinism tier {tier!r}", where="DataProgram",
                               hint=f"use one of {', '.join(TIERS)}")
        self.build, self.tier = build, tier
        self.name = name or getattr(build, "__name__", "program")

    def content_id(self) -> str:
        return f"data:{program_id(self.build)}:{self.tier}"

    def __repr__(self) -> str:
        return f"DataProgram({self.name}, tier={self.tier})"

    def encode(self, payload: Any, params: dict, stamp: str) -> bytes:
        """The shard as bytes: header (op graph, inputs by hash) and the inputs' raw bytes."""
        names, arrays, call = _flatten(payload)
        holders = [_placeholder(n, a) for n, a in zip(names, arrays)]
        args, kw = call(holders)
        clash = set(kw) & set(params)
        if clash:
            raise ShardRefused(f"payload keys {sorted(clash)} clash with params", where=f"DataProgram {self.name}",
                               hint="rename the params")
        try:
            out = self.build(*args, **kw, **params)
        except ScellisError:
            raise
        except Exception as e:
            raise ShardRefused(f"building the program failed: {type(e).__name__}: {e}",
                               where=f"DataProgram {self.name}",
                               hint="build with scellis_jupyter.graph.functional on the placeholders") from e
        nodes, structure = _outputs(out, self.name)
        program = _ir(nodes, holders, self.name)
        header = {"format": FORMAT, "engine": __version__, "stamp": stamp, "tier": self.tier,
                  "program": program, "outputs": structure, "inputs": []}
        return _pack(SHARD_MAGIC, header, "inputs", list(zip(names, arrays)))

    def __call__(self, payload: Any, **params) -> Any:
        blob = self.encode(payload, params, stamp="local")
        return open_result(run_data_shard(blob), shard_header(blob))


def _flatten(payload: Any):
    """(input names, arrays, how to call the builder with placeholders)."""
    if isinstance(payload, dict):
        names = [str(k) for k in payload]
        return names, [_array(payload[k], k) for k in payload], lambda hs: ((), dict(zip(names, hs)))
    if isinstance(payload, (list, tuple)):
        names = [str(i) for i in range(len(payload))]
        return names, [_array(v, i) for i, v in enumerate(payload)], lambda hs: (tuple(hs), {})
    return ["x"], [_array(payload, "x")], lambda hs: ((hs[0],), {})


def _array(v: Any, name) -> np.ndarray:
    if not isinstance(v, (np.ndarray, np.generic, int, float, bool)):
        raise ShardRefused(f"input {name!r} is a {type(v).__name__}: a data shard carries only arrays and numbers",
                           where="DataProgram", hint="pass numpy arrays (or numbers) as the payload")
    a = np.asarray(v)
    try:
        d = dt.canon(a.dtype)
    except ScellisError:
        raise ShardRefused(f"input {name!r} has dtype {a.dtype}, which the engine does not take", where="DataProgram",
                           hint=f"use one of {', '.join(dt.DTYPES)}") from None
    out = np.ascontiguousarray(a.astype(dt.to_numpy(d)))
    if a.dtype.kind in "iu" and not np.array_equal(out, a):
        raise ShardRefused(f"input {name!r} has integers outside int32", where="DataProgram", hint="cast it first")
    return out


def _placeholder(name: str, a: np.ndarray) -> Node:
    return make("placeholder", [], shape=tuple(int(s) for s in a.shape), dtype=dt.canon(a.dtype), name=name)


def _outputs(out: Any, where: str):
    if isinstance(out, Node):
        return [out], {"kind": "one"}
    if isinstance(out, (list, tuple)) and out and all(isinstance(o, Node) for o in out):
        return list(out), {"kind": "list"}
    if isinstance(out, dict) and out and all(isinstance(o, Node) for o in out.values()):
        return list(out.values()), {"kind": "dict", "keys": [str(k) for k in out]}
    raise ShardRefused(f"the program returned {type(out).__name__}, not graph nodes", where=f"DataProgram {where}",
                       hint="return a Node, or a list or dict of Nodes")


def _attr(v: Any, where: str) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_attr(x, where) for x in v]
    raise ShardRefused(f"{where} has an attribute of type {type(v).__name__}, which cannot travel as data",
                       where="DataProgram", hint="attributes are numbers, strings and tuples of them")


def _ir(outputs: list[Node], holders: list[Node], name: str) -> dict:
    """The op graph in schedule order: [op, [input positions], attrs, shape, dtype]; inputs as ["input", name]."""
    order = toposort(outputs, cut_realized=False)
    pos, values = {}, []
    held = {h.id for h in holders}
    for n in order:
        if n.op == "placeholder":
            if n.id not in held:
                raise ShardRefused("the program reads a placeholder that is not one of its inputs",
                                   where=f"DataProgram {name}", hint="build only on the placeholders given")
            values.append(["input", [], {"name": n.attrs["name"]}, _attr(n.shape, "a shape"), n.dtype])
        elif n.realized or n.op == "const":
            raise ShardRefused(f"the program holds a tensor with data ({n.op}, shape {tuple(n.shape)})",
                               where=f"DataProgram {name}",
                               hint="pass data as the payload, or numbers as params: a data shard has no hidden "
                                    "state")
        else:
            values.append([n.op, [pos[i.id] for i in n.inputs],
                           {k: _attr(v, f"op {n.op!r}") for k, v in sorted(n.attrs.items())},
                           _attr(n.shape, "a shape"), _attr(n.dtype, "a dtype")])
        pos[n.id] = len(values) - 1
    body = {"values": values, "outputs": [pos[o.id] for o in outputs]}
    return {**body, "hash": ir_hash(body)}


def ir_hash(body: dict) -> str:
    """The program's content address: BLAKE3 of its canonical JSON (values and outputs)."""
    text = json.dumps({"values": body["values"], "outputs": body["outputs"]}, sort_keys=True,
                      separators=(",", ":"))
    return blake3.blake3(text.encode()).hexdigest()


def _pack(magic: bytes, header: dict, key: str, arrays: list) -> bytes:
    parts, off = [], 0
    for name, a in arrays:
        b = a.tobytes()
        header[key].append({"name": name, "dtype": dt.canon(a.dtype), "shape": list(a.shape),
                            "hash": blake3.blake3(b).hexdigest(), "offset": off, "nbytes": len(b)})
        parts.append(b)
        off += len(b)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return magic + struct.pack("<I", len(text)) + text + b"".join(parts)


def _unpack(blob: Any, magic: bytes, what: str) -> tuple[dict, memoryview]:
    if not isinstance(blob, (bytes, bytearray)):
        raise ShardRefused(f"the {what} is a {type(blob).__name__}, not bytes", where=_WHERE,
                           hint="a data shard is a byte string made by DataProgram.encode")
    if len(blob) < 12 or blob[:8] != magic:
        raise ShardRefused(f"the {what} does not start with {magic.decode()}", where=_WHERE,
                           hint="it is not a scellis data shard")
    (n,) = struct.unpack("<I", blob[8:12])
    if n > MAX_HEADER or 12 + n > len(blob):
        raise ShardRefused(f"the {what}'s header claims {n} bytes", where=_WHERE, hint="it is truncated or forged")
    try:
        header = json.loads(bytes(blob[12:12 + n]))
    except ValueError as e:
        raise ShardRefused(f"the {what}'s header is not JSON: {e}", where=_WHERE, hint="it is corrupt") from None
    if not isinstance(header, dict):
        raise ShardRefused(f"the {what}'s header is not an object", where=_WHERE, hint="it is corrupt")
    return header, memoryview(blob)[12 + n:]


def _arrays(specs: Any, data: memoryview, what: str) -> dict[str, np.ndarray]:
    """The arrays a header lists, each checked against its dtype, shape, bounds and BLAKE3 hash."""
    if not isinstance(specs, list):
        raise ShardRefused(f"the {what} list is not a list", where=_WHERE, hint="the shard is malformed")
    out = {}
    for s in specs:
        if not isinstance(s, dict) or set(s) != _INPUT_KEYS:
            extra = sorted(set(s) - _INPUT_KEYS) if isinstance(s, dict) else s
            raise ShardRefused(f"an entry of {what} has fields {extra!r}: an input is carried bytes, named only "
                               "by dtype, shape and hash (no path, URL or store reference)", where=_WHERE,
                               hint=f"fields are {sorted(_INPUT_KEYS)}")
        name, d, shape, off, nb = s["name"], s["dtype"], s["shape"], s["offset"], s["nbytes"]
        if d not in dt.DTYPES or not isinstance(shape, list) or not all(isinstance(x, int) and x >= 0 for x in shape):
            raise ShardRefused(f"{what} {name!r} has dtype {d!r} and shape {shape!r}", where=_WHERE,
                               hint=f"dtypes are {', '.join(dt.DTYPES)}")
        npd = np.dtype(dt.to_numpy(d))
        want = int(np.prod(shape, dtype=np.int64)) * npd.itemsize
        if not (isinstance(off, int) and isinstance(nb, int)) or nb != want or off < 0 or off + nb > len(data):
            raise ShardRefused(f"{what} {name!r} claims bytes [{off}, {off}+{nb}) of {len(data)} carried "
                               f"({want} needed)", where=_WHERE, hint="the shard is truncated or forged")
        raw = data[off:off + nb]
        if blake3.blake3(raw).hexdigest() != s["hash"]:
            raise ShardRefused(f"{what} {name!r}'s bytes do not match its hash", where=_WHERE,
                               hint="the shard was altered in transit")
        out[str(name)] = np.frombuffer(raw, npd).reshape(shape).copy()
    return out


def shard_header(blob: bytes) -> dict:
    """The header of a data shard (what the client expects back is derived from it)."""
    return _unpack(blob, SHARD_MAGIC, "shard")[0]


# ---- the peer side --------------------------------------------------------------------------------------
def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def rebuild(header: dict, inputs: dict[str, np.ndarray]) -> list[Node]:
    """The output nodes of the shard's program, every value re-inferred by this engine's op set."""
    prog = header.get("program")
    if not isinstance(prog, dict) or set(prog) != {"values", "outputs", "hash"} or not isinstance(prog["values"], list):
        raise ShardRefused("the shard's program is not {values, outputs, hash}", where=_WHERE,
                           hint="the shard is malformed")
    if ir_hash(prog) != prog["hash"]:
        raise ShardRefused("the shard's program does not match its content hash", where=_WHERE,
                           hint="the program was altered after it was hashed")
    nodes: list[Node] = []
    total, cap = 0, settings.number("SCELLIS_PEER_MAX_BYTES")      # what one shard may make a peer allocate
    for i, v in enumerate(prog["values"]):
        if not (isinstance(v, list) and len(v) == 5 and isinstance(v[0], str) and isinstance(v[1], list)
                and isinstance(v[2], dict)):
            raise ShardRefused(f"value {i} is not [op, inputs, attrs, shape, dtype]", where=_WHERE,
                               hint="the shard is malformed")
        op, ins, attrs, shape, dtype = v
        here = f"{_WHERE}, value {i} ({op!r})"
        if op == "input":
            name = attrs.get("name")
            if set(attrs) != {"name"} or name not in inputs:
                raise ShardRefused(f"value {i} reads input {name!r}, which the shard does not carry: a peer reads "
                                   "nothing but the shard's own bytes (no file, store or network)", where=here,
                                   hint=f"the shard carries {sorted(inputs)}")
            a = inputs[name]
            node = make("placeholder", [], shape=a.shape, dtype=dt.canon(a.dtype), name=name)
        else:
            if op not in INTERPRETER_OPS:
                raise ShardRefused(f"op {op!r} is not an op of this engine's interpreter (it has compute ops "
                                   "only: nothing opens a file or a socket)", where=here,
                                   hint=did_you_mean(op, INTERPRETER_OPS) or "the shard was made by another engine")
            if not all(isinstance(j, int) and 0 <= j < i for j in ins):
                raise ShardRefused(f"value {i} reads values {ins}: inputs must come earlier", where=here,
                                   hint="the shard is malformed")
            try:
                node = make(op, [nodes[j] for j in ins], **{k: _tuples(x) for k, x in attrs.items()})
            except ScellisError as e:
                raise ShardRefused(f"value {i} does not check: {e.diagnostic.message}", where=here,
                                   hint="the shard was made by another engine or forged") from None
            except Exception as e:
                raise ShardRefused(f"value {i} does not check: {type(e).__name__}: {e}", where=here,
                                   hint="the shard was made by another engine or forged") from None
        if _tuples(shape) != tuple(node.shape):
            raise ShardRefused(f"value {i} claims shape {shape} but its inputs give {node.shape}", where=here,
                               hint="the shard's shapes are forged")
        if _tuples(dtype) != node.dtype:
            raise ShardRefused(f"value {i} claims dtype {dtype} but its inputs give {node.dtype}", where=here,
                               hint="the shard's dtypes are forged")
        shapes = node.shape if node.multi else (node.shape,)
        dtypes = node.dtype if node.multi else (node.dtype,)
        total += sum(dt.nbytes(s, d) for s, d in zip(shapes, dtypes))
        if total > cap:
            raise ShardRefused(f"the shard would make this peer allocate over {cap} bytes", where=here,
                               hint="cut the job into smaller shards (SCELLIS_PEER_MAX_BYTES sets the limit)")
        nodes.append(node)
    outs = prog["outputs"]
    if not isinstance(outs, list) or not outs or not all(isinstance(o, int) and 0 <= o < len(nodes) for o in outs):
        raise ShardRefused(f"the shard's outputs {outs!r} are not values of its program", where=_WHERE,
                           hint="the shard is malformed")
    return [nodes[o] for o in outs]


def run_data_shard(blob: bytes) -> bytes:
    """What a peer runs for a data shard: parse, check, rebuild, compile and interpret; no effects."""
    from ..backends.reference import ReferenceBackend
    from ..executor.executor import execute
    from ..program.schedule import compile_program
    header, data = _unpack(blob, SHARD_MAGIC, "shard")
    if set(header) != _SHARD_KEYS or header["format"] != FORMAT:
        raise ShardRefused(f"the shard has fields {sorted(header)} (format {header.get('format')!r})", where=_WHERE,
                           hint=f"a {FORMAT} shard has {sorted(_SHARD_KEYS)}")
    if header["tier"] not in TIERS or not isinstance(header["stamp"], str):
        raise ShardRefused(f"the shard names tier {header['tier']!r}", where=_WHERE,
                           hint=f"tiers are {', '.join(TIERS)}")
    inputs = _arrays(header["inputs"], data, "input")
    outputs = rebuild(header, inputs)
    backend = ReferenceBackend()
    with no_effects():
        prog, leaves = compile_program(outputs, backend.name, header["tier"])
        feeds = [backend.from_numpy(inputs[l.attrs["name"]], l.dtype) for l in leaves]
        results = [backend.to_numpy(s) for s in execute(prog, feeds, backend)]
    arrays = [(str(i), np.asarray(r)) for i, r in enumerate(results)]
    answer = {"format": FORMAT, "stamp": header["stamp"], "program": header["program"]["hash"], "outputs": []}
    return _pack(RESULT_MAGIC, answer, "outputs", arrays)


# ---- back on the client ---------------------------------------------------------------------------------
def _rejected(reason: str, **details) -> RejectedResult:
    return RejectedResult(reason, where="Pool.run", hint="the peer's answer is not accepted", **details)


def open_result(blob: Any, sent: dict) -> Any:
    """The value a peer's answer carries, if it answers the shard `sent` (by stamp and program hash) with
    outputs of the declared shapes and dtypes; otherwise RejectedResult naming why (stale, wrong shape...)."""
    try:
        header, data = _unpack(blob, RESULT_MAGIC, "answer")
        if set(header) != {"format", "stamp", "program", "outputs"}:
            raise _rejected(f"the answer has fields {sorted(header)}")
        arrays = _arrays(header["outputs"], data, "output")
    except ShardRefused as e:
        raise _rejected(f"the answer is malformed: {e.diagnostic.message}") from None
    if header["stamp"] != sent["stamp"] or header["program"] != sent["program"]["hash"]:
        raise _rejected(f"stale: the answer is for attempt {str(header['stamp'])[:16]} of program "
                        f"{str(header['program'])[:12]}, not the one asked ({sent['stamp'][:16]})", stale=True)
    values = sent["program"]["values"]
    want = [values[o] for o in sent["program"]["outputs"]]
    if len(arrays) != len(want):
        raise _rejected(f"the answer has {len(arrays)} outputs, the program {len(want)}")
    got = [arrays[str(i)] if str(i) in arrays else None for i in range(len(want))]
    for i, (a, w) in enumerate(zip(got, want)):
        if a is None or tuple(a.shape) != _tuples(w[3]) or dt.canon(a.dtype) != w[4]:
            shape = None if a is None else a.shape
            raise _rejected(f"output {i} has shape {shape}, the program declares {tuple(w[3])} {w[4]}")
    kind = sent["outputs"]["kind"]
    if kind == "one":
        return got[0]
    if kind == "dict":
        return dict(zip(sent["outputs"]["keys"], got))
    return got
