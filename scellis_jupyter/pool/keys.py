"""The user's signing keys, and the pins that say which key and which chain head a ledger must show.

Why outside the ledger: a ledger that carries its own key (or sits beside it) proves nothing, since whoever
can write the file can re-sign it. The private key lives in the user's key store (`settings.key_dir()`:
folder 0700, files 0600, never inside the ledger's folder), and each ledger's pin (its signer's public key,
and the chain's head: count and last hash) is kept there too, where the trust decision lives. `verify`
checks a ledger against its pin, not against what the file says about itself; the head catches truncation.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import blake3
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .. import settings
from ..errors import LedgerError


def key_dir() -> Path:
    """The key store folder, made 0700 on first use."""
    d = settings.key_dir()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def _write_private(path: Path, data: bytes) -> None:
    """Atomic write of a 0600 file (temp file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def check_outside(ledger: Path) -> None:
    """Refuse a key store inside the ledger's folder: a key beside the ledger signs forgeries for anyone."""
    d, folder = settings.key_dir().resolve(), ledger.resolve().parent
    if d == folder or folder in d.parents:
        raise LedgerError(f"the key store {d} is inside the ledger's folder {folder}", where=str(ledger),
                          hint="point SCELLIS_KEY_DIR outside any ledger or store folder (default ~/.config/scellis/keys)")


def signing_key(name: str = "ledger") -> Ed25519PrivateKey:
    """The user's Ed25519 key `name` from the key store (made, 0600, on first use); a looser file is refused."""
    path = key_dir() / f"{name}.key"
    if path.exists():
        if path.stat().st_mode & 0o077:
            raise LedgerError(f"the signing key {path} is readable by others "
                              f"(mode {oct(path.stat().st_mode & 0o777)})", where=str(path),
                              hint=f"chmod 600 {path}")
        return serialization.load_pem_private_key(path.read_bytes(), password=None)
    key = Ed25519PrivateKey.generate()
    _write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return key


def public_hex(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The raw public key, hex (64 characters): how pins and messages name a key."""
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def load_public(spec: str) -> Ed25519PublicKey:
    """A public key the user names: 64 hex characters, or a file (PEM public or private key, or the hex)."""
    text = spec.strip()
    if os.path.isfile(text):
        raw = Path(text).read_bytes()
        try:
            k = serialization.load_pem_public_key(raw)
        except ValueError:
            try:
                k = serialization.load_pem_private_key(raw, password=None).public_key()
            except (ValueError, TypeError):
                text = raw.decode(errors="replace").strip()
            else:
                return k
        else:
            if isinstance(k, Ed25519PublicKey):
                return k
    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text))
    except ValueError:
        raise LedgerError(f"{spec!r} is not an Ed25519 public key", where="--key",
                          hint="give the 64 hex characters `scellis ledger verify` printed, or a PEM file") from None


def _pin_path(ledger: str | os.PathLike) -> Path:
    return key_dir() / "pins" / (blake3.blake3(str(Path(ledger).resolve()).encode()).hexdigest()[:32] + ".json")


def read_pin(ledger: str | os.PathLike) -> dict | None:
    """The pin of the ledger at this path: {"path", "public_key", "count", "head"}, or None if never pinned."""
    p = _pin_path(ledger)
    if not p.exists():
        return None
    try:
        pin = json.loads(p.read_text())
        return {"path": str(pin["path"]), "public_key": str(pin["public_key"]), "count": int(pin["count"]),
                "head": str(pin["head"])}
    except (ValueError, KeyError, TypeError):
        raise LedgerError("the ledger's pin in the key store is not readable", where=str(p),
                          hint="the key store was edited; restore it from a copy") from None


def write_pin(ledger: str | os.PathLike, public_key: str, count: int, head: str) -> dict:
    """Pin (or move forward) the ledger's signer and head in the key store."""
    p = _pin_path(ledger)
    p.parent.mkdir(exist_ok=True, mode=0o700)
    pin = {"path": str(Path(ledger).resolve()), "public_key": public_key, "count": int(count), "head": head}
    _write_private(p, json.dumps(pin, sort_keys=True).encode())
    return pin


def check_head(where: str, pin: dict | None, hashes: list[str], what: str = "receipts",
               kept: str = "its pin") -> None:
    """The chain must still hold the pinned head: as many entries at least, the pinned one unchanged."""
    if pin is None or pin["count"] == 0:
        return
    c = pin["count"]
    if len(hashes) < c:
        raise LedgerError(f"the ledger holds {len(hashes)} {what} but {kept} says {c} (truncated)", where=where,
                          hint=f"{what} were removed; restore the ledger from a copy")
    if hashes[c - 1] != pin["head"]:
        raise LedgerError(f"entry {c} is not the one its head names (hash {hashes[c - 1][:16]}…, kept "
                          f"{pin['head'][:16]}…): the chain was rewritten", where=where,
                          hint="restore the ledger from a copy")
