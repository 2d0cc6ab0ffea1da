"""A test certificate authority and the certificates the security tests need, in PEM.

Written with ``cryptography`` in milliseconds: a CA, a broker key store as Apache Kafka reads PEM
(KIP-651: the PKCS#8 key, then the leaf, then the CA, in one file), a client certificate for
mutual TLS, and a second CA that signed none of them (an untrusted CA, as a client sees it). The
broker's certificate names ``127.0.0.1`` only, so a client that connects to ``localhost`` meets a
host name that does not match.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def untrusted_ca(self) -> Path:
        return self.directory / "other-ca.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _ca(common: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(_name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    common: str, issuer: tuple[ec.EllipticCurvePrivateKey, x509.Certificate], san: bool
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(issuer[1].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if san:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return key, builder.sign(issuer[0], hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pkcs8(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_pki(directory: Path) -> Pki:
    """Write ``ca.pem``, ``broker.pem``, ``client.pem``/``client.key`` and ``other-ca.pem``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca("replicator test CA")
    broker_key, broker_cert = _leaf("broker", ca, san=True)
    client_key, client_cert = _leaf("replicator-client", ca, san=False)
    _, other_ca = _ca("a CA nobody trusts")
    (directory / "ca.pem").write_bytes(_pem(ca[1]))
    (directory / "broker.pem").write_bytes(_pkcs8(broker_key) + _pem(broker_cert) + _pem(ca[1]))
    (directory / "client.pem").write_bytes(_pem(client_cert))
    (directory / "client.key").write_bytes(_pkcs8(client_key))
    (directory / "other-ca.pem").write_bytes(_pem(other_ca))
    return Pki(directory)
