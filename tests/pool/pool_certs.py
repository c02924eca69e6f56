"""A throwaway certificate authority for consortium-pool tests, made with `cryptography` (EC P-256, 1 day)."""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _window(b: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return b.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))


def make_ca(folder: Path, cn: str):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _window(x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)).sign(key, hashes.SHA256())
    path = folder / f"{cn}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, path


def issue(folder: Path, ca_key, ca_cert, cn: str) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1/localhost signed by the CA, usable as server and client."""
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    eku = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
    cert = _window(x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .add_extension(san, critical=False).add_extension(eku, critical=False)).sign(ca_key, hashes.SHA256())
    crt, pem = folder / f"{cn}.crt", folder / f"{cn}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return crt, pem


def security(ca: Path, crt: Path, key: Path):
    from distributed.security import Security
    return Security(tls_ca_file=str(ca), tls_client_cert=str(crt), tls_client_key=str(key),
                    tls_scheduler_cert=str(crt), tls_scheduler_key=str(key), tls_worker_cert=str(crt),
                    tls_worker_key=str(key), require_encryption=True)
