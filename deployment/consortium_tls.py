"""TLS and SuperNode-authentication material for a Flower consortium.

Flower 1.42: the SuperLink serves every API over TLS with ``--ssl-ca-certfile``,
``--ssl-certfile`` and ``--ssl-keyfile``; with ``--enable-supernode-auth`` only SuperNodes
whose EC public key was registered (``flwr supernode register <key.pub>``) may connect, each
signing its requests with ``--auth-supernode-private-key``; SuperNodes and the ``flwr`` CLI
verify the SuperLink with the CA certificate (``--root-certificates`` / ``root-certificates``).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from panoramia_fl.contracts.errors import UserError


class CredentialsError(UserError, RuntimeError):
    """openssl or ssh-keygen failed (the message carries its error output)."""


@dataclass(frozen=True)
class ConsortiumTLS:
    """TLS and SuperNode-authentication material of a consortium.

    ``ca_cert`` signs ``server_cert`` (whose subjectAltName must cover the SuperLink's
    address); each SuperNode ``i`` signs its requests with ``node_keys[i]`` (an EC private
    key in OpenSSH format) whose public key ``<key>.pub`` is registered with the SuperLink
    before the node starts.
    """

    ca_cert: Path
    server_cert: Path
    server_key: Path
    node_keys: list[Path]


def make_demo_credentials(
    out_dir: Path, num_nodes: int, *, host: str = "127.0.0.1"
) -> ConsortiumTLS:
    """A throw-away CA, a SuperLink certificate for ``host`` and one EC key pair per node,
    made with ``openssl`` and ``ssh-keygen``. For loopback tests and demos only: real sites
    use certificates from their organisation's PKI and keep private keys on their machines.
    """
    out_dir.mkdir(parents=True, exist_ok=True)

    def run(command: str, *extra: str) -> None:
        argv = [*command.split(), *extra]
        res = subprocess.run(argv, cwd=out_dir, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise CredentialsError(f"{command} failed: {res.stderr.strip()}")

    run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -keyout ca.key -out ca.crt",
        "-subj", "/CN=panoramia-demo-ca")  # fmt: skip
    run("openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr",
        "-subj", "/CN=superlink")  # fmt: skip
    # The SuperLink's address must be in the certificate's subjectAltName.
    san = f"IP:{host}" if host.replace(".", "").isdigit() else f"DNS:{host}"
    (out_dir / "server.ext").write_text(
        f"subjectAltName={san},DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    run("openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
        "-out server.pem -extfile server.ext")  # fmt: skip
    keys = []
    for i in range(num_nodes):
        key = out_dir / f"supernode-{i}"
        run("ssh-keygen -q -t ecdsa -b 384 -N", "", "-f", str(key))
        keys.append(key)
    return ConsortiumTLS(
        ca_cert=out_dir / "ca.crt",
        server_cert=out_dir / "server.pem",
        server_key=out_dir / "server.key",
        node_keys=keys,
    )
