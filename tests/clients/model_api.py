"""A scripted stand-in for the model APIs the real Claude Code and Codex CLIs call, on loopback.

Speaks the Anthropic Messages API (POST /v1/messages, streamed as SSE or plain JSON) and the OpenAI Responses API
(POST /v1/responses, SSE). Each test gives a list of replies, taken in order by the requests that ask for a turn:
a str is a text reply, a dict {"tool": name, "input": {...}} a tool call (for Codex's namespaced MCP tools, add
"namespace": "mcp__persmem" and give the tool's own name). When the script is used up the stand-in
answers "done.". Every request body is recorded in `requests` as (path, parsed JSON) for the test to read.
Requests that are not a main turn (Claude Code's title/topic side calls with no tools, count_tokens) are answered
without taking a scripted reply."""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ModelApi:
    def __init__(self, replies: list | None = None):
        self.replies = list(replies or [])
        self.requests: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ModelApi":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def script(self, replies: list) -> None:
        with self._lock:
            self.replies = list(replies)

    def turns(self, path: str) -> list[dict]:
        """The recorded bodies of the main-turn requests to `path` (the ones that offered tools)."""
        return [body for p, body in self.requests if p == path and body.get("tools")]

    def next_reply(self, body: dict):
        with self._lock:
            if not body.get("tools"):
                return "ok"
            return self.replies.pop(0) if self.replies else "done."

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._json(200, {"data": [], "models": []})

            def do_HEAD(self):
                self._json(200, {})

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?")[0]
                with api._lock:
                    api.requests.append((path, body))
                if path.endswith("/count_tokens"):
                    return self._json(200, {"input_tokens": 100})
                if path.endswith("/v1/messages"):
                    return self._anthropic(body)
                if path.endswith("/v1/responses"):
                    return self._openai(body)
                self._json(404, {"error": {"type": "not_found_error", "message": f"no {path} here"}})

            def _json(self, status: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: list[tuple[str | None, dict]]):
                chunks = []
                for name, payload in events:
                    head = f"event: {name}\n" if name else ""
                    chunks.append(f"{head}data: {json.dumps(payload)}\n\n")
                data = "".join(chunks).encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _anthropic(self, body: dict):
                reply = api.next_reply(body)
                n = next(api._ids)
                if isinstance(reply, dict):
                    block = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": reply["tool"], "input": reply["input"]}
                    stop = "tool_use"
                else:
                    block = {"type": "text", "text": reply}
                    stop = "end_turn"
                usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 0}
                message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant",
                           "model": body.get("model", "claude"), "content": [], "stop_reason": None,
                           "stop_sequence": None, "usage": usage}
                if not body.get("stream"):
                    return self._json(200, message | {"content": [block], "stop_reason": stop})
                if block["type"] == "text":
                    start = {"type": "text", "text": ""}
                    delta = {"type": "text_delta", "text": block["text"]}
                else:
                    start = block | {"input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                self._sse([
                    ("message_start", {"type": "message_start", "message": message}),
                    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
                    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                       "usage": {"output_tokens": 5}}),
                    ("message_stop", {"type": "message_stop"}),
                ])

            def _openai(self, body: dict):
                reply = api.next_reply(body)
                n = next(api._ids)
                if isinstance(reply, dict):
                    item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": reply["tool"],
                            "arguments": json.dumps(reply["input"]), "status": "completed"}
                    if reply.get("namespace"):  # Codex lists MCP tools in a namespace (type "namespace")
                        item["namespace"] = reply["namespace"]
                else:
                    item = {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": reply, "annotations": []}]}
                response = {"id": f"resp_{n}", "object": "response", "status": "in_progress", "output": [],
                            "model": body.get("model", "gpt")}
                usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
                self._sse([
                    ("response.created", {"type": "response.created", "response": response}),
                    ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                    "item": item}),
                    ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                                   "item": item}),
                    ("response.completed", {"type": "response.completed",
                                            "response": response | {"status": "completed", "output": [item],
                                                                    "usage": usage}}),
                ])

        return Handler
