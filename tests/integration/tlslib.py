"""Test certificates made with the openssl command line: a private CA and
server certificates it signs, for the TLS tests of the ClickHouse store
(test_store_conformance.py) and of agent -> server shipping (test_tls.py).

Each call makes fresh keys in a directory of the test; nothing is shared
with the system's trust store.
"""

import subprocess
from pathlib import Path


def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{r.stderr}")


def make_ca(d, name="ca", cn="flamewatch test CA"):
    """A self-signed CA (P-256); returns (cert path, key path)."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={cn}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    return d / f"{name}.pem", d / f"{name}.key"


def make_cert(d, ca, name, sans, cn="flamewatch test server"):
    """A server certificate signed by ca (a make_ca result) for sans, e.g.
    ["IP:127.0.0.1", "DNS:localhost"]; returns (cert path, key path). The
    CN is not a host name: only the SANs name the host."""
    d = Path(d)
    ca_pem, ca_key = ca
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    (d / f"{name}.ext").write_text(
        f"subjectAltName={','.join(sans)}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca_pem), "-CAkey", str(ca_key),
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
             cwd=d)
    # clickhouse-server runs as this user but reads the key once at start.
    (d / f"{name}.key").chmod(0o600)
    return d / f"{name}.pem", d / f"{name}.key"
