"""The key store: keys made 0600 outside any ledger folder, a looser key refused, public keys named by hex or
PEM, pins kept per ledger path."""
from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization

import scellis_jupyter as sc
from scellis_jupyter.pool import keys


@pytest.fixture
def store(tmp_path, monkeypatch):
    d = tmp_path / "keys"
    monkeypatch.setenv("SCELLIS_KEY_DIR", str(d))
    return d


def test_a_key_is_made_once_0600_in_a_0700_folder(store):
    k = keys.signing_key("t")
    assert (store / "t.key").stat().st_mode & 0o777 == 0o600 and store.stat().st_mode & 0o777 == 0o700
    assert keys.public_hex(keys.signing_key("t")) == keys.public_hex(k)


def test_a_key_readable_by_others_is_refused(store):
    keys.signing_key("t")
    (store / "t.key").chmod(0o644)
    with pytest.raises(sc.LedgerError, match="readable by others") as e:
        keys.signing_key("t")
    assert "chmod 600" in e.value.diagnostic.hint


def test_a_public_key_is_named_by_hex_or_pem(store, tmp_path):
    k = keys.signing_key("t")
    hexkey = keys.public_hex(k)
    pem = tmp_path / "pub.pem"
    pem.write_bytes(k.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo))
    assert keys.public_hex(keys.load_public(hexkey)) == hexkey == keys.public_hex(keys.load_public(str(pem)))
    with pytest.raises(sc.LedgerError, match="not an Ed25519 public key"):
        keys.load_public("zz")


def test_pins_are_kept_per_ledger_path(store, tmp_path):
    assert keys.read_pin(tmp_path / "a.sqlite") is None
    keys.write_pin(tmp_path / "a.sqlite", "ab" * 32, 3, "cd" * 32)
    assert keys.read_pin(tmp_path / "a.sqlite")["count"] == 3 and keys.read_pin(tmp_path / "b.sqlite") is None
    with pytest.raises(sc.LedgerError, match="holds 2 receipts but its pin says 3"):
        keys.check_head("x", keys.read_pin(tmp_path / "a.sqlite"), ["00" * 32, "11" * 32])
