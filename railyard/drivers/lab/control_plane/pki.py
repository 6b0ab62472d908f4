"""The lab control plane's certificates: a CA of the stack's own, and what each component presents.

ECDSA P-256 throughout (kube-apiserver, etcd's clients and Kueue's webhook server all take it, and
it is cheap to make). Keys are written 0600 in the control plane's directory and never leave it
except the admin's, which goes into the kubeconfig the stack outputs as a Pulumi secret.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from typing import TypeGuard
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
# Renewed on the next up when less than this is left, so a long-lived lab never expires mid-run.
RENEW_BEFORE = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Leaf:
    """A certificate the CA issues: file stem, subject, what it is for."""

    name: str
    common_name: str
    organization: str | None = None
    server: bool = False
    client: bool = False
    ips: tuple[str, ...] = ()
    dns: tuple[str, ...] = ()


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    tmp.replace(path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _load(path: Path) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return None


def _fresh(cert: x509.Certificate | None, now: datetime.datetime) -> TypeGuard[x509.Certificate]:
    return cert is not None and cert.not_valid_after_utc - now > RENEW_BEFORE


def ensure_ca(d: Path, name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, bool]:
    """The CA in `d` (ca.crt, ca.key), made when missing or near expiry; (cert, key, made)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = _load(d / "ca.crt")
    if _fresh(cert, now):
        try:
            key = serialization.load_pem_private_key((d / "ca.key").read_bytes(), None)
            if isinstance(key, ec.EllipticCurvePrivateKey) and key.public_key() == cert.public_key():
                return cert, key, False
        except (OSError, ValueError):
            pass
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write(d / "ca.key", _key_pem(key), 0o600)
    _write(d / "ca.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert, key, True


def _subject(leaf: Leaf) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, leaf.common_name)]
    if leaf.organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, leaf.organization))
    return x509.Name(attrs)


def _matches(cert: x509.Certificate, ca: x509.Certificate, leaf: Leaf) -> bool:
    if cert.issuer != ca.subject or cert.subject != _subject(leaf):
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        ips = sorted(str(i) for i in san.get_values_for_type(x509.IPAddress))
        dns = sorted(san.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        ips, dns = [], []
    return ips == sorted(leaf.ips) and dns == sorted(leaf.dns)


def ensure_leaf(d: Path, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, leaf: Leaf,
                renew: bool = False) -> bool:
    """`<name>.crt` and `<name>.key` in `d`, issued again when missing, near expiry, for other
    addresses or by another CA; whether it was issued."""
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = _load(d / f"{leaf.name}.crt")
    if not renew and _fresh(cert, now) and _matches(cert, ca, leaf) and (d / f"{leaf.name}.key").is_file():
        return False
    key = ec.generate_private_key(ec.SECP256R1())
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if leaf.server else []) + \
        ([ExtendedKeyUsageOID.CLIENT_AUTH] if leaf.client else [])
    builder = (x509.CertificateBuilder().subject_name(_subject(leaf)).issuer_name(ca.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                            crl_sign=False, content_commitment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False, decipher_only=False),
                              critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(i)) for i in leaf.ips]
    names += [x509.DNSName(n) for n in leaf.dns]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(d / f"{leaf.name}.key", _key_pem(key), 0o600)
    _write(d / f"{leaf.name}.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return True


def ensure_signing_key(d: Path, name: str) -> bool:
    """The service-account token signing key pair (`<name>.key`, `<name>.pub`)."""
    if (d / f"{name}.key").is_file() and (d / f"{name}.pub").is_file():
        return False
    key = ec.generate_private_key(ec.SECP256R1())
    _write(d / f"{name}.key", _key_pem(key), 0o600)
    _write(d / f"{name}.pub", key.public_key().public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)
    return True


def expiring(d: Path) -> list[str]:
    """The certificates in `d` that the next ensure would issue again for their age."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return sorted(p.name for p in d.glob("*.crt") if not _fresh(_load(p), now))
