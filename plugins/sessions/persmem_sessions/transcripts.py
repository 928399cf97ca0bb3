"""Turns out of the clients' transcript lines: what a person (or an AI) would call one step of the session.

Each line of a transcript file becomes zero or more turns on its own, never depending on the lines around
it, so the turns of a session (and their indexes) come out the same however its lines were sent in batches.
A turn is {"role": "user"|"assistant"|"tool", "text": str, "time": str}: what someone said, or one tool call
or tool result (its input or output cut to `tool_output_chars`). Thinking / reasoning, metadata and
bookkeeping lines give none. Lines that are not JSON, or not the shape described here, give none either:
the archive keeps them as they came.

Formats followed (docs/sessions.md shows a sample of each):

Claude Code (2.0.x; `~/.claude/projects/<folder>/<session>.jsonl`): one JSON object a line with "type":
- "user": "message": {"role": "user", "content": str | [blocks]}; blocks "text" {"text"}, "tool_result"
  {"tool_use_id", "content": str | [{"type": "text", "text"} | {"type": "image", ...}], "is_error"}, "image".
  "isMeta": true marks lines the client wrote itself (caveats): skipped.
- "assistant": "message": {"role": "assistant", "content": [blocks]}; blocks "text", "tool_use" {"id",
  "name", "input": {...}}, "thinking" (skipped).
- "summary", "system", "file-history-snapshot", "queue-operation": no turns.
Every message line carries "timestamp", "cwd", "sessionId".

Codex CLI (rollout format of codex-rs/protocol, 0.46 to 0.6x; `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`):
{"timestamp", "type", "payload"} a line; "type" is "session_meta" (payload: id, cwd, cli_version, ...),
"turn_context", "event_msg" (UI events that repeat the messages: skipped) or "response_item", whose payload:
- "message": {"role": "user"|"assistant"|"developer"|"system", "content": [{"type": "input_text" |
  "output_text", "text"}]}; developer/system messages and the user messages Codex writes itself
  (<environment_context>, <user_instructions>, AGENTS.md instructions) are skipped;
- "function_call" {"name", "arguments": JSON text, "call_id"}; "function_call_output" {"call_id", "output":
  text (older versions: JSON text {"output", "metadata"}) or [content items]};
- "custom_tool_call" {"name", "input"}, "custom_tool_call_output" {"output"}, "local_shell_call"
  {"action": {"command": [...]}}, "web_search_call" {"action": {"query"}};
- "reasoning": skipped.
Rollouts from before 0.4x hold the same items bare, one a line, after a header line {"id", "timestamp", ...}
(no "payload", no time): their turns are read alike, with no time.
"""

from __future__ import annotations

import json
from typing import Any

from persmem_core.sdk import valid_text

CLIENTS = ("claude", "codex")
CODEX_INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<permissions",
                  "<user_shell_command>")
CODEX_BARE_ITEMS = ("message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
                    "local_shell_call", "web_search_call")  # what a rollout before 0.4x holds bare on a line


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, saying how long it was when cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text):,} characters in all]"


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _block_text(content: Any) -> str:
    """The text of a content value: a string, or a list of text / image blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else _compact(content)
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            kind = block.get("type")
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif kind in ("image", "input_image"):
                parts.append("[image]")
    return "\n".join(part for part in parts if part)


def _turn(role: str, text: str, time: str) -> dict:
    return {"role": role, "text": valid_text(text), "time": valid_text(time)}


def _claude_turns(line: dict, tool_chars: int) -> list[dict]:
    kind = line.get("type")
    message = line.get("message")
    if kind not in ("user", "assistant") or not isinstance(message, dict) or line.get("isMeta"):
        return []
    time = line.get("timestamp") if isinstance(line.get("timestamp"), str) else ""
    content = message.get("content")
    if isinstance(content, str):
        return [_turn(kind, content, time)] if content.strip() else []
    if not isinstance(content, list):
        return []
    turns, said = [], []
    for block in content:
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype == "text" and isinstance(block.get("text"), str):
            said.append(block["text"])
        elif btype == "tool_use":
            text = f"call {block.get('name', '?')}: {_compact(block.get('input', {}))}"
            turns.append(_turn("tool", cut(text, tool_chars), time))
        elif btype == "tool_result":
            prefix = "error: " if block.get("is_error") else "result: "
            turns.append(_turn("tool", cut(prefix + _block_text(block.get("content")), tool_chars), time))
    text = "\n".join(s for s in said if s.strip())
    return ([_turn(kind, text, time)] if text else []) + turns


def _codex_output(output: Any) -> str:
    if isinstance(output, str):
        try:
            decoded = json.loads(output)
        except (ValueError, RecursionError):
            return output
        if isinstance(decoded, dict) and isinstance(decoded.get("output"), str):
            return decoded["output"]  # older versions: {"output": ..., "metadata": {"exit_code", ...}}
        return output
    if isinstance(output, dict):  # {"content": ..., "success": false}
        return _block_text(output.get("content"))
    return _block_text(output)


def _codex_turns(line: dict, tool_chars: int) -> list[dict]:
    payload = line.get("payload")
    if "payload" not in line and line.get("type") in CODEX_BARE_ITEMS:  # a rollout from before 0.4x
        payload = line
    elif line.get("type") != "response_item" or not isinstance(payload, dict):
        return []
    time = line.get("timestamp") if isinstance(line.get("timestamp"), str) else ""
    kind = payload.get("type")
    if kind == "message":
        role = payload.get("role")
        text = _block_text(payload.get("content"))
        if role not in ("user", "assistant") or not text.strip():
            return []
        if role == "user" and text.lstrip().startswith(CODEX_INJECTED):
            return []
        return [_turn(role, text, time)]
    if kind == "function_call":
        text = f"call {payload.get('name', '?')}: {_compact(payload.get('arguments', ''))}"
    elif kind == "custom_tool_call":
        text = f"call {payload.get('name', '?')}: {_compact(payload.get('input', ''))}"
    elif kind == "local_shell_call":
        action = payload.get("action") if isinstance(payload.get("action"), dict) else {}
        command = action.get("command")
        text = f"call shell: {' '.join(map(str, command)) if isinstance(command, list) else _compact(command)}"
    elif kind == "web_search_call":
        action = payload.get("action") if isinstance(payload.get("action"), dict) else {}
        text = f"call web_search: {_compact(action.get('query') or action.get('url') or '')}"
    elif kind in ("function_call_output", "custom_tool_call_output"):
        text = "result: " + _codex_output(payload.get("output"))
    else:
        return []
    return [_turn("tool", cut(text, tool_chars), time)]


def line_turns(client: str, line: str, tool_chars: int) -> list[dict]:
    """The turns one transcript line holds (see the module's docstring); [] for anything else."""
    try:  # RecursionError: a line nested deeper than the parser (or re-encoding a tool's input) goes
        decoded = json.loads(line)
        if not isinstance(decoded, dict):
            return []
        return _claude_turns(decoded, tool_chars) if client == "claude" else _codex_turns(decoded, tool_chars)
    except (ValueError, RecursionError):
        return []


def _objects(lines: list[str]):
    """The lines that are JSON objects, decoded (the others are skipped)."""
    for line in lines:
        try:
            decoded = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            continue
        if isinstance(decoded, dict):
            yield decoded


def transcript_cwd(client: str, lines: list[str]) -> str:
    """The working folder a transcript names (Claude Code: any message's "cwd"; Codex: session_meta's or
    turn_context's "cwd"), or ""."""
    for decoded in _objects(lines):
        where = decoded if client == "claude" else decoded.get("payload")
        if isinstance(where, dict) and isinstance(where.get("cwd"), str) and where["cwd"]:
            return valid_text(where["cwd"])
    return ""


def transcript_session_id(client: str, lines: list[str]) -> str:
    """The session id a transcript names (Claude Code: "sessionId"; Codex: session_meta's "id"), or ""."""
    for decoded in _objects(lines):
        if client == "claude" and isinstance(decoded.get("sessionId"), str):
            return decoded["sessionId"]
        payload = decoded.get("payload")
        if client == "codex" and decoded.get("type") == "session_meta" and isinstance(payload, dict) \
                and isinstance(payload.get("id"), str):
            return payload["id"]
    return ""
