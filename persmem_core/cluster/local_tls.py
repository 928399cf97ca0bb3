"""TLS for a local NATS cluster (local_cluster.py) that listens beyond loopback: a private CA and one certificate per
server, for clients and for the routes between servers, made here and kept across restarts.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
from pathlib import Path

from persmem_core.cluster.local_credentials import write_private


class ClusterTLS:
    """A private CA and one certificate per NATS server (for clients and for the routes between servers), made with
    `cryptography` under `folder` (keys 0600) and kept: a restart finds them."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.ca_path = folder / "ca.pem"

    def ensure(self, names_and_hosts: list[tuple[str, list[str]]]) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        pem = serialization.Encoding.PEM
        key_pem = dict(encoding=pem, format=serialization.PrivateFormat.PKCS8,
                       encryption_algorithm=serialization.NoEncryption())
        now = datetime.datetime.now(datetime.timezone.utc)
        ca_key_path = self.folder / "ca.key"
        if self.ca_path.exists() and ca_key_path.exists():
            ca_cert = x509.load_pem_x509_certificate(self.ca_path.read_bytes())
            ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), None)
        else:
            ca_key = ec.generate_private_key(ec.SECP256R1())
            ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "persmem NATS cluster CA")])
            ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
                       .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
                       .not_valid_before(now - datetime.timedelta(minutes=5))
                       .not_valid_after(now + datetime.timedelta(days=3650))
                       .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                       .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                    content_commitment=False, key_encipherment=False,
                                                    data_encipherment=False, key_agreement=False,
                                                    encipher_only=False, decipher_only=False), critical=True)
                       .sign(ca_key, hashes.SHA256()))
            write_private(ca_key_path, ca_key.private_bytes(**key_pem))
            write_private(self.ca_path, ca_cert.public_bytes(pem))
            os.chmod(self.ca_path, 0o644)  # the CA certificate is public: clients need it
        for name, hosts in names_and_hosts:
            cert_path, key_path = self.cert_path(name), self.key_path(name)
            if cert_path.exists() and key_path.exists() and self._covers(cert_path, hosts, ca_cert):
                continue
            key = ec.generate_private_key(ec.SECP256R1())
            alt = []
            for host in dict.fromkeys(hosts):
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(host.strip("[]"))))
                except ValueError:
                    alt.append(x509.DNSName(host))
            cert = (x509.CertificateBuilder()
                    .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                    .issuer_name(ca_cert.subject).public_key(key.public_key())
                    .serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(minutes=5))
                    .not_valid_after(now + datetime.timedelta(days=825))
                    .add_extension(x509.SubjectAlternativeName(alt), critical=False)
                    .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                          ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                    .sign(ca_key, hashes.SHA256()))
            write_private(key_path, key.private_bytes(**key_pem))
            write_private(cert_path, cert.public_bytes(pem))

    @staticmethod
    def _covers(cert_path: Path, hosts: list[str], ca_cert) -> bool:
        """Whether the certificate at `cert_path` was issued by this CA for every one of `hosts`."""
        from cryptography import x509

        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if cert.issuer != ca_cert.subject:
            return False
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        have = {str(v) for v in names.get_values_for_type(x509.IPAddress)}
        have |= set(names.get_values_for_type(x509.DNSName))
        return all(h.strip("[]") in have for h in hosts)

    def cert_path(self, name: str) -> Path:
        return self.folder / f"{name}.pem"

    def key_path(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    def client_context(self) -> ssl.SSLContext:
        """An SSL context that trusts this CA only (what a client of the cluster checks the servers with)."""
        return ssl.create_default_context(cafile=str(self.ca_path))


def certificate_hosts(host: str) -> list[str]:
    """The names a NATS server listening on `host` is reached by, for its certificate: the address itself (unless it
    is a wildcard), loopback, and this machine's names and addresses."""
    hosts = ["127.0.0.1", "::1", "localhost"]
    if host not in ("0.0.0.0", "::", "[::]", ""):
        hosts.insert(0, host)
    for name in {socket.gethostname(), socket.getfqdn()}:
        if name:
            hosts.append(name)
            try:
                hosts += [info[4][0] for info in socket.getaddrinfo(name, None)]
            except OSError:
                pass
    return list(dict.fromkeys(h.split("%")[0] for h in hosts))
