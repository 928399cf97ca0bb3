"""Shared helpers for the sessions plugin's tests: real servers, the owner's socket, the fixtures' transcripts.

A module of its own name (not conftest.py): `from conftest import ...` finds whichever plugin's conftest a full
run imported first."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import httpx2
import msgspec

from persmem_core.sdk import socket_path
from persmem_core.sdk.testing import clean_env, start_server

FIXTURES = Path(__file__).parent / "fixtures"
TESTS = Path(__file__).parent
CLAUDE_SESSION = "7f3c2a10-5b8e-4c1d-9a2f-6e4b8d0c1a23"
CODEX_SESSION = "0199a2d7-41c4-78b1-b7cc-a45d62a89cd5"
PLUGIN_SOURCE = Path(__file__).resolve().parents[1]


def plugin_env() -> dict[str, str]:
    """Until the sessions plugin is pip-installed (its helper does that), load it from its folder."""
    try:
        metadata.distribution("persmem-plugin-sessions")
        return {}
    except metadata.PackageNotFoundError:
        return {"PERSMEM_PLUGIN_MODULES": "persmem_sessions.plugin", "PYTHONPATH": str(PLUGIN_SOURCE)}


NO_MEMORY = {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"}

# Every secret planted in the fixtures' transcripts, and how many redactions each file's capture counts
# (the Claude Code tool result repeats its .env in "toolUseResult", so those four are found twice).
PLANTED = {
    "claude_session.jsonl": [
        "Tr0ub4dor-and-3", "sk_live_51HxQ2bLkZ9aYc3Pq7RtUvWxYz0A1B2C3D4", "whsec_9fJk2LmN4pQr6StUv8WxYz0Ab",
        "sk-proj-Zx81LmQwErTyUiOpAsDfGhJkL0987poiuYTrewq",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJsZWRnZXIifQ.Qm9vbXNoYWthbGFrYQ",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ", "ghp_R7cXq2LmN9pQ4sT6vW8yZ0aB1cD3eF5gH7iJ",
        "AKIAQ3EXAMPLE7VXK2PL", "Jx7vYq2LmN9pQ4sT6vW8yZ0aB1cD3eF5gH7iJk8L",
    ],
    "codex_rollout.jsonl": [
        "r3d1s-Auth-T0ken-2026-staging", "xoxb-2026114030-5551234567890-Zx81LmQwErTyUiOpAsDfGhJk",
        "sk-ant-api03-Qw8rTy2UiOp4AsDf6GhJk8LzXc0VbNm2QwErTyUiOp-AbCdEf", "glpat-Xy7Zq2Lm9Np4Qr6St8Uv",
    ],
}
REDACTIONS = {"claude_session.jsonl": 13, "codex_rollout.jsonl": 4}


def fixture_lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def socket_client(home: Path, agent: str) -> httpx2.Client:
    """The owner's local socket, speaking as `agent` (no token: the socket is the user's own)."""
    return httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket_path(home))), base_url="http://persmem",
                         headers={"X-Persmem-Agent": agent}, timeout=30)


def capture(http: httpx2.Client, lines: list[str], session_id: str = CLAUDE_SESSION, client: str = "claude",
            first_line: int = 0, cwd: str = "/home/dev/src/billing-api") -> httpx2.Response:
    return http.post("/sessions/capture", json={"client": client, "session_id": session_id, "cwd": cwd,
                                                "first_line": first_line, "lines": lines, "event": "Stop"})


def home_sealer(home: Path):
    """A Sealer with the home's key (the server made it at its first start), as `persmem` loads it; a plain one
    when the home has no key."""
    from persmem_core.sdk.testing import keys
    from persmem_core.sdk.testing import EncryptionConfig

    return keys.load_sealer(home, EncryptionConfig(), clean_env(home), create=False)


def session_metas(home: Path, agent: str) -> list[dict]:
    """Every archived session's metadata of `agent`, read from disk (sealed or not)."""
    from persmem_sessions import archive

    sealer = home_sealer(home)
    return [msgspec.to_builtins(archive.decode_meta(path, path.read_bytes(), sealer))
            for path in (home / "sessions" / agent).glob("*/*.meta.json")]


def archived(home: Path, agent: str, client: str, session_id: str) -> tuple[str, dict]:
    """(the archive's text as the metadata counts it, the metadata) of one session, wherever its project put it;
    read from disk in either format (plain gzip, or sealed under the home's key)."""
    from persmem_sessions import archive

    [gz] = (home / "sessions" / agent).glob(f"*/{client}-{session_id}.jsonl.gz")
    base = Path(str(gz)[: -len(".jsonl.gz")])
    sealer = home_sealer(home)
    meta = archive.load_meta(base, sealer)
    text = b"".join(archive.raw_lines(base, meta, sealer)).decode()
    return text, msgspec.to_builtins(meta)


def serve(home: Path, agents=("kite", "wren"), memory: bool = False, record: Path | None = None, **env: str):
    """A real `persmem serve` in `home`; without the memory plugin unless asked, and with the recording plugin
    (tests/recording_plugin.py: what `index_session_turns` receives, as JSON lines in `record`) when given."""
    extra = {} if memory else dict(NO_MEMORY)
    if record is not None:
        extra |= {"PERSMEM_PLUGIN_MODULES": "recording_plugin", "PYTHONPATH": str(TESTS),
                  "PERSMEM_TEST_RECORD": str(record)}
    return start_server(home, agents, clean_env(home, **extra, **env))


def read_record(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
