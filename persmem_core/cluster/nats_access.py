"""Who the NATS link connects as (nats_link.py): the [cluster] credentials, refused unless private to this user, the
TLS context the servers are checked with, and how to tell a server's refusal of them from any other failure.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from persmem_core.errors import UserError
from persmem_core.settings import ClusterConfig


def private_file(path: str, setting: str) -> str:
    """`path` (a [cluster] setting's file: a seed or .creds) once it is a regular file private to this user; else
    UserError naming the problem and the command that fixes it."""
    from persmem_core.crypto.keys import check_key_file

    try:
        problem = check_key_file(Path(path).expanduser())
    except FileNotFoundError:
        raise UserError(f"[cluster] {setting} = {path!r} does not exist. Point it at this node's file "
                        "(`persmem cluster up` prints them; `persmem cluster user NAME` makes one).") from None
    if problem:
        raise UserError(f"[cluster] {setting} is not private, so persmem will not use it: {problem}.")
    return str(Path(path).expanduser())


def tls_context(config: ClusterConfig) -> ssl.SSLContext | None:
    """The TLS context the link checks the servers with: [cluster] tls_ca_file, or the system's CAs for tls://
    servers; None when neither (plain NATS)."""
    if config.tls_ca_file:
        try:
            return ssl.create_default_context(cafile=str(Path(config.tls_ca_file).expanduser()))
        except (OSError, ssl.SSLError) as exc:
            raise UserError(f"[cluster] tls_ca_file = {config.tls_ca_file!r} is not a readable CA certificate "
                            f"({exc}). Point it at the cluster's CA (`persmem cluster up` writes tls/ca.pem)."
                            ) from None
    if any(url.startswith("tls://") for url in config.servers):
        return ssl.create_default_context()
    return None


def connect_options(config: ClusterConfig) -> dict[str, Any]:
    """The credentials and TLS part of nats.connect's keyword arguments for `config`."""
    options: dict[str, Any] = {}
    if config.credentials:
        options["user_credentials"] = private_file(config.credentials, "credentials")
    elif config.nkey_file:
        options["nkeys_seed"] = private_file(config.nkey_file, "nkey_file")
    context = tls_context(config)
    if context is not None:
        options["tls"] = context
    return options


def refusal(exc: BaseException) -> str | None:
    """The server's words when `exc` says it refused this client's credentials or TLS (None: another failure)."""
    text = str(exc)
    if isinstance(exc, ssl.SSLError):  # a certificate that does not check out against [cluster] tls_ca_file
        return f"TLS: {getattr(exc, 'reason', None) or exc}"
    for words in ("Authorization Violation", "User Authentication Expired", "Account Authentication Expired",
                  "TLS Required", "Secure Connection - TLS Required"):
        if words.lower() in text.lower():
            return words
    return None

