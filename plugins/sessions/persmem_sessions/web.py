"""/sessions: what the client hooks (hook.py) call on the running server. JSON in, JSON out.

Mounted with auth="agent": on the owner's local socket as the agent in `X-Persmem-Agent`, on the TCP port
with the agent's bearer token. Everything is about the caller's own sessions.

- GET  /sessions/capture/{client}/{session_id} -> {"lines": n}: lines of this session already archived
- POST /sessions/capture {"client", "session_id", "cwd", "repo", "first_line", "lines": [str], "event"}
       -> {"archived", "total_lines", "redactions", "project"}; 409 {"error", "lines"} when first_line is not
       the archived count (resend from "lines")
- GET  /sessions/indexing -> {"turns", "indexed_turns", "sessions", "sessions_waiting", "indexes"}: how far the
       indexing of the caller's sessions has got (`persmem sessions import` follows it with a progress bar)
- POST /sessions/briefing {"client", "session_id", "cwd", "repo", "source"} -> {"context", "tokens", "project",
       "memory_ids"}
- POST /sessions/recall {"client", "session_id", "cwd", "repo", "prompt"} -> {"context", "memory_ids"}

And, mounted at /hooks with no auth (it holds no secret): GET /hooks/client.py -> the hook client (hook.py, one
stdlib-only file, text/x-python), for a machine without persmem:
`curl -fsS https://box/hooks/client.py -o ~/.persmem-hook.py && python3 ~/.persmem-hook.py install --url
https://box/ --agent NAME` (the token on stdin or in $PERSMEM_TOKEN).

`repo` (optional) is the repository root the client found at or above `cwd` on its own disk: the project is
named after it. The server looks for one itself only inside the [workspace] roots (projects.py).

Errors are {"error": "..."}: 400 for a request that is not what is described here (naming the field), 409
above, 503 while the server starts or stops. A body over [server] max_body_bytes (4 MB by default) is
answered 413 by the core before it gets here, naming the limit and the setting: the hooks send a long
transcript in batches (about 1 MB each), and a single line may be as long as that limit allows (a
screenshot in a tool result). Request contents are never logged: they are transcripts, and redaction
happens in the service.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import anyio
import msgspec
from msgspec import Meta
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from persmem_core.sdk import NotReady, UserError, agent_of_scope

from .service import CaptureConflict, SessionsService

SESSION_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}\Z"  # \Z, not $: $ also matches before a final line break
SESSION_ID_RE = re.compile(SESSION_ID_PATTERN)

Client = Literal["claude", "codex"]
SessionId = Annotated[str, Meta(pattern=SESSION_ID_PATTERN)]
Cwd = Annotated[str, Meta(max_length=4096)]


class CaptureRequest(msgspec.Struct, forbid_unknown_fields=True):
    client: Client
    session_id: SessionId
    first_line: Annotated[int, Meta(ge=0)]
    lines: list[str]
    cwd: Cwd = ""
    repo: Cwd = ""
    event: Annotated[str, Meta(max_length=64)] = ""


class BriefingRequest(msgspec.Struct, forbid_unknown_fields=True):
    client: Client
    session_id: SessionId
    cwd: Cwd = ""
    repo: Cwd = ""
    source: Annotated[str, Meta(max_length=64)] = ""


class RecallRequest(msgspec.Struct, forbid_unknown_fields=True):
    client: Client
    session_id: SessionId
    prompt: Annotated[str, Meta(max_length=200_000)]
    cwd: Cwd = ""
    repo: Cwd = ""


FIELD_HELP = ('client is "claude" or "codex"; session_id is 1-128 letters, digits, ".", "_", ":" or "-"; '
              "first_line a whole number from 0; lines a list of strings (the transcript's JSONL lines); cwd and "
              "repo absolute folders up to 4096 characters")


def _error(message: str, status: int, **extra) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def build_app(get_service) -> Starlette:
    def caller(request: Request) -> str:
        agent = agent_of_scope(request.scope)  # always set behind auth="agent"; never guessed if not
        if not agent:
            raise UserError("no authenticated agent")
        return agent

    async def decode(request: Request, kind: type, what: str):
        try:
            return msgspec.json.decode(await request.body(), type=kind)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return _error(f"invalid {what} request: {str(exc)[:300]}. ({FIELD_HELP}.)", 400)

    async def run(request: Request, work) -> JSONResponse:
        try:
            agent = caller(request)
            sessions: SessionsService = get_service()
            return JSONResponse(await anyio.to_thread.run_sync(lambda: work(sessions, agent)))
        except NotReady as exc:
            return _error(str(exc), 503)
        except CaptureConflict as exc:
            return _error(str(exc), 409, lines=exc.lines)
        except UserError as exc:
            return _error(str(exc), 400)

    async def line_count(request: Request) -> JSONResponse:
        client, session_id = request.path_params["client"], request.path_params["session_id"]
        if client not in ("claude", "codex") or not SESSION_ID_RE.fullmatch(session_id):
            return _error(f"invalid capture path: {FIELD_HELP.split('; first_line')[0]}.", 400)
        return await run(request, lambda s, agent: {"lines": s.line_count(agent, client, session_id)})

    async def capture(request: Request) -> JSONResponse:
        body = await decode(request, CaptureRequest, "capture")
        if isinstance(body, JSONResponse):
            return body
        return await run(request, lambda s, agent: s.capture(agent, body.client, body.session_id, body.cwd,
                                                             body.first_line, body.lines, body.repo))

    async def indexing(request: Request) -> JSONResponse:
        return await run(request, lambda s, agent: s.indexing(agent))

    async def briefing(request: Request) -> JSONResponse:
        body = await decode(request, BriefingRequest, "briefing")
        if isinstance(body, JSONResponse):
            return body
        return await run(request, lambda s, agent: s.briefing(agent, body.client, body.session_id, body.cwd,
                                                              body.repo))

    async def recall(request: Request) -> JSONResponse:
        body = await decode(request, RecallRequest, "recall")
        if isinstance(body, JSONResponse):
            return body
        return await run(request, lambda s, agent: s.recall(agent, body.client, body.session_id, body.cwd,
                                                            body.prompt, body.repo))

    return Starlette(routes=[
        Route("/capture/{client}/{session_id:path}", line_count, methods=["GET"]),
        Route("/capture", capture, methods=["POST"]),
        Route("/indexing", indexing, methods=["GET"]),
        Route("/briefing", briefing, methods=["POST"]),
        Route("/recall", recall, methods=["POST"]),
    ])


def build_client_app() -> Starlette:
    """GET /client.py: the hook client's source, read once (the file this package runs as its hook)."""
    from pathlib import Path

    from . import hook

    source = Path(hook.__file__).read_bytes()

    async def client_file(request: Request) -> Response:
        return Response(source, media_type="text/x-python; charset=utf-8",
                        headers={"Content-Disposition": 'attachment; filename="persmem-hook.py"',
                                 "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})

    return Starlette(routes=[Route("/client.py", client_file, methods=["GET"])])
