"""Certificates the test ground makes itself with openssl: a CA, broker certificates and mTLS client certificates.

Kafka reads them as PEM (`ssl.keystore.type=PEM`): a keystore is the unencrypted PKCS#8 key followed by the
certificate chain. Clients (librdkafka) take the CA file and the client's certificate and key files.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from .procs import DevEnvError


def _openssl(cwd: Path, *args: str) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode != 0:
        raise DevEnvError(f"openssl {args[0]} failed: {res.stderr[-1000:]}")


@dataclass(frozen=True)
class Issued:
    """One certificate and its key as files (PEM), and the keystore Kafka reads (key + chain)."""

    cert: Path
    key: Path
    keystore: Path


class CertificateAuthority:
    """A throwaway CA in `home` (made on first use, kept while the directory lives) that issues certificates."""

    def __init__(self, home: Path, name: str = "sparkmirror-test-ca", days: int = 2) -> None:
        self.home, self.days = home, days
        self.cert, self.key = home / "ca.crt", home / "ca.key"
        if not self.cert.exists():
            home.mkdir(parents=True, exist_ok=True)
            _openssl(home, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                     "-days", str(days), "-subj", f"/CN={name}")

    def issue(self, name: str, common_name: str, sans: list[str] = (), client: bool = False) -> Issued:
        """A certificate `name`.crt for `common_name`; `sans` as openssl writes them (`DNS:localhost`,
        `IP:127.0.0.1`); `client` makes a client-authentication certificate (mTLS)."""
        d = self.home
        issued = Issued(d / f"{name}.crt", d / f"{name}.key", d / f"{name}.keystore.pem")
        if issued.keystore.exists():
            return issued
        _openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.raw.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={common_name}")
        ext = [f"extendedKeyUsage={'clientAuth' if client else 'serverAuth'}"]
        if sans:
            ext.append("subjectAltName=" + ",".join(sans))
        (d / f"{name}.ext").write_text("\n".join(ext) + "\n")
        _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", str(self.days), "-extfile", f"{name}.ext")
        _openssl(d, "pkcs8", "-topk8", "-nocrypt", "-in", f"{name}.raw.key", "-out", f"{name}.key")
        issued.keystore.write_bytes(issued.key.read_bytes() + issued.cert.read_bytes() + self.cert.read_bytes())
        return issued
