"""HTTP hygiene, attacked over raw sockets and real clients against a real `persmem serve`.

Grouped by attack class: slow clients (slowloris), secrets in logs, responses a browser could misuse,
guessing credentials, streams that outlive their credential, malformed bodies.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path

import httpx2
import pytest

from persmem_core.auth.agents import AgentStore
from persmem_core.testing import MCP_HEADERS, MCP_INITIALIZE as INIT

# The memory plugin's model load is the slow part of a start, and nothing here needs it.
NO_MEMORY = {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"}
FAST_DEADLINES = {"header_timeout_seconds": 1, "body_idle_timeout_seconds": 1, "body_timeout_seconds": 3}
DEPLOY_DOC = Path(__file__).parent.parent / "docs" / "deploy.md"


@pytest.fixture
def server(persmem_server):
    """start(agents=("kite", "wren"), **server_config) -> a server without the memory plugin."""

    def start(agents=("kite", "wren"), **server_config):
        return persmem_server(agents=list(agents), config={"server": server_config} if server_config else None,
                              env=NO_MEMORY)

    return start


def connect(server, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", server.port))
    return sock


def read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and the seconds that took."""
    start, data = time.monotonic(), b""
    sock.settimeout(timeout)
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open for {timeout}s; got {data[:200]!r}") from None
    except ConnectionResetError:
        pass
    return data, time.monotonic() - start


def exchange(server, request: bytes, timeout: float = 10) -> bytes:
    with connect(server) as sock:
        sock.sendall(request)
        return read_until_closed(sock, timeout)[0]


def request_bytes(server, target: bytes, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    fields = {"Host": f"127.0.0.1:{server.port}", "Connection": "close", "Content-Type": "application/json",
              "Accept": "application/json, text/event-stream", "Content-Length": str(len(body)), **(headers or {})}
    lines = [b"POST " + target + b" HTTP/1.1"] + [f"{name}: {value}".encode() for name, value in fields.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def headers_of(response: bytes) -> dict[str, str]:
    head = response.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    return {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in head)}


# -- slow clients (slowloris) -------------------------------------------------------------------------------

def test_headers_sent_slowly_are_cut_off_with_408(server):
    running = server(**FAST_DEADLINES)
    with connect(running) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        start = time.monotonic()
        closed = threading.Event()

        def dribble():  # one header byte every 0.2 s: each byte must not extend the deadline
            while not closed.is_set() and time.monotonic() - start < 5:
                try:
                    sock.send(b"X")
                except OSError:
                    return
                time.sleep(0.2)

        threading.Thread(target=dribble, daemon=True).start()
        response, _ = read_until_closed(sock, 5)
        elapsed = time.monotonic() - start
        closed.set()
    assert status_of(response) == 408 and b"header_timeout_seconds" in response
    assert elapsed < 2.5


def test_a_connection_that_never_sends_a_request_is_closed(server):
    running = server(**FAST_DEADLINES)
    with connect(running) as sock:
        response, elapsed = read_until_closed(sock, 5)
    assert status_of(response) == 408 and elapsed < 2.5


def test_half_the_headers_after_a_kept_alive_request_are_cut_off(server):
    running = server(**FAST_DEADLINES)
    with connect(running) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(0.2)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        response, elapsed = read_until_closed(sock, 5)
    assert status_of(response) == 408 and elapsed < 2.5


def test_a_body_that_stops_midway_is_cut_off(server):
    running = server(**FAST_DEADLINES)
    body = json.dumps(INIT).encode()
    request = request_bytes(running, b"/mcp", body, running.headers("kite"))
    with connect(running) as sock:
        sock.sendall(request[: len(request) - len(body) // 2])
        response, elapsed = read_until_closed(sock, 5)
    assert status_of(response) == 408 and elapsed < 2.5
    assert running.call_tool("persmem_whoami", agent="kite")["agent"] == "kite"


def test_a_body_dribbled_without_pauses_still_has_a_total_deadline(server):
    running = server(**FAST_DEADLINES)  # a pause never exceeds 1 s, but the whole body must come within 3 s
    request = request_bytes(running, b"/mcp", b" " * 1000, running.headers("kite"))
    head = request[:-1000]
    with connect(running) as sock:
        sock.sendall(head)
        start = time.monotonic()
        while time.monotonic() - start < 6:
            try:
                sock.send(b" ")
            except OSError:
                break
            sock.settimeout(0.3)
            try:
                if sock.recv(65536, socket.MSG_PEEK):
                    break
            except TimeoutError:
                continue
        response, _ = read_until_closed(sock, 5)
        elapsed = time.monotonic() - start
    assert status_of(response) == 408 and 2.5 < elapsed < 5


def test_twenty_slow_connections_do_not_stop_a_normal_mcp_call(server):
    running = server(header_timeout_seconds=30, body_idle_timeout_seconds=30)
    body = json.dumps(INIT).encode()
    slow = []
    for i in range(20):
        sock = connect(running)
        if i % 2:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        else:
            sock.sendall(request_bytes(running, b"/mcp", body, running.headers("kite"))[:-10])
        slow.append(sock)
    try:
        start = time.monotonic()
        assert running.call_tool("persmem_whoami", agent="wren")["agent"] == "wren"
        assert time.monotonic() - start < 5
    finally:
        for sock in slow:
            sock.close()


def test_uvicorns_h11_parser_gets_the_same_deadlines():
    """uvicorn uses h11 where httptools is not installed: the deadlines hold on that parser too."""
    import asyncio

    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from persmem_core.transport.http_deadlines import with_read_deadlines
    from persmem_core.net.addresses import free_port

    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    port = free_port()
    protocol = with_read_deadlines(H11Protocol, header=1, body_idle=1, body=3)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=protocol, log_level="warning", lifespan="off")
    userver = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(userver.serve()), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not userver.started and time.monotonic() < deadline:
            time.sleep(0.05)
        target = type("Target", (), {"port": port})
        with connect(target) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            response, elapsed = read_until_closed(sock, 5)
        assert status_of(response) == 408 and elapsed < 2.5
        with connect(target) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
            response, elapsed = read_until_closed(sock, 5)
        assert status_of(response) == 408 and elapsed < 2.5
        with connect(target) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc")
            assert status_of(read_until_closed(sock, 5)[0]) == 200
    finally:
        userver.should_exit = True
        thread.join(10)


# -- secrets in logs ----------------------------------------------------------------------------------------

def test_the_secret_path_is_never_logged_in_any_request_target_form(server):
    running = server(agents=["kite"], log_level="debug", **FAST_DEADLINES)
    secret = AgentStore(running.home).add("wren", token=False, secret_path=True).secret_path
    s = secret.encode()
    encoded = "".join(f"%{ord(c):02X}" for c in secret).encode()
    body = json.dumps(INIT).encode()
    targets = [
        b"http://127.0.0.1:%d/%s/mcp" % (running.port, s),  # absolute-form
        b"/x/../" + s + b"/mcp",
        b"/%2e%2e/" + s + b"/mcp",
        b"//" + s + b"/mcp",
        b"/" + encoded + b"/mcp",
        b"/%25" + encoded + b"/mcp",  # double-encoded
        b"/mcp/" + s,
        b"/" + s + b"x/mcp",
        b"/x;" + s + b"/mcp",
        b"/" + s + b"/nowhere",
        b"/" + s + b"/mcp?q=" + s,
    ]
    for target in targets:
        exchange(running, request_bytes(running, target, body))
    exchange(running, b"GET /" + s + b"/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nBroken header\r\n\r\n")  # 400
    exchange(running, b"GET /" + s + b"/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # 408
    exchange(running, request_bytes(running, b"/" + s + b"/mcp", body, {"Host": "evil.example"}))  # 421
    time.sleep(0.3)
    log = running.log()
    assert "/<secret>/mcp 200 agent=wren" in log  # the requests did arrive and were logged
    for form in (secret, encoded.decode(), encoded.decode().lower(), secret[:32]):
        assert form not in log


def test_request_paths_cannot_forge_log_lines(server):
    running = server(agents=["kite"])
    # Short segments (a long one would be logged as <secret> anyway), one starting a new line.
    forged = b"/x%0a2026-01-01%2000:00:00,000/WARNING%20persmem.http:/persmem%20auth%20failure%20from/6.6.6.6"
    exchange(running, request_bytes(running, forged, b"{}", running.headers("kite")))
    time.sleep(0.2)
    assert not any(line.startswith("2026-01-01") for line in running.log().splitlines())
    assert "6.6.6.6" not in failing_addresses(running.log())


# -- responses a browser could misuse -----------------------------------------------------------------------

EXPECTED_HEADERS = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "no-referrer"}


def assert_security_headers(response: bytes, *, own_csp: bool = False) -> None:
    headers = headers_of(response)
    for name, value in EXPECTED_HEADERS.items():
        assert headers.get(name) == value, (name, response[:400])
    if not own_csp:
        assert headers.get("content-security-policy") == "default-src 'none'; frame-ancestors 'none'"


def test_every_answer_carries_security_headers_errors_included(server):
    running = server(agents=["kite"], max_body_bytes=4096, **FAST_DEADLINES)
    kite = running.headers("kite")
    body = json.dumps(INIT).encode()

    def get(path: bytes, headers=None) -> bytes:
        lines = [b"GET " + path + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
        lines += [f"{k}: {v}".encode() for k, v in (headers or {}).items()]
        return exchange(running, b"\r\n".join(lines) + b"\r\n\r\n")

    answers = {
        200: exchange(running, request_bytes(running, b"/mcp", body, kite)),
        "healthz": get(b"/healthz"),
        404: get(b"/nowhere", kite),
        401: get(b"/mcp"),
        403: exchange(running, request_bytes(running, b"/mcp", body, {**kite, "Origin": "https://evil.example"})),
        421: exchange(running, request_bytes(running, b"/mcp", body, {**kite, "Host": "evil.example"})),
        413: exchange(running, request_bytes(running, b"/mcp", b" " * 5000, kite)),
        "plugin": get(b"/amq/unread", kite),
        400: exchange(running, b"GET /mcp HTTP/1.1\r\nBroken header\r\n\r\n"),
        408: exchange(running, b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
    }
    for expected, response in answers.items():
        if isinstance(expected, int):
            assert status_of(response) == expected, response[:300]
        assert_security_headers(response)
    for refusal in (answers[401], answers[403], answers[421]):
        assert headers_of(refusal)["cache-control"] == "no-store"


def test_a_route_keeps_the_security_headers_it_sets_itself(server):
    running = server(agents=["kite"])
    page = httpx2.get(running.base_url + "/dashboard/login", timeout=10)
    assert page.status_code == 200
    assert "form-action 'self'" in page.headers["content-security-policy"]  # the dashboard's own policy
    assert len(page.headers.get_list("content-security-policy")) == 1
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"


# -- guessing credentials -----------------------------------------------------------------------------------

FAILURE_LINE = re.compile(r"persmem auth failure from (\S+)$")


def failing_addresses(log: str) -> list[str]:
    return [m.group(1) for line in log.splitlines() if (m := FAILURE_LINE.search(line))]


def timed_post(server, headers, source="127.0.0.1", path=b"/mcp") -> tuple[int, float]:
    start = time.monotonic()
    with connect(server, source) as sock:
        sock.sendall(request_bytes(server, path, json.dumps(INIT).encode(), headers))
        response, _ = read_until_closed(sock, 20)
    return status_of(response), time.monotonic() - start


def test_repeated_failures_from_one_address_are_slowed_and_logged(server):
    running = server(agents=["kite"])
    wrong = {"Authorization": "Bearer pm_guess"}
    times = [timed_post(running, wrong) for _ in range(5)]
    assert all(status == 401 for status, _ in times)
    assert times[0][1] < 1 and times[3][1] > 0.8 and times[4][1] > 1.8  # 0, 0.25, 0.5, 1, 2 s
    # A right token from the same address, and a guess from another address, are not held up (the next
    # failure from 127.0.0.1 would wait 4 s).
    assert timed_post(running, running.headers("kite"))[1] < 1
    status, elapsed = timed_post(running, wrong, source="127.0.0.2")
    assert status == 401 and elapsed < 1
    guessed_path = timed_post(running, {}, source="127.0.0.4", path=b"/" + b"A" * 43 + b"/mcp")
    assert guessed_path[0] == 401
    time.sleep(0.2)
    assert failing_addresses(running.log()) == ["127.0.0.1"] * 5 + ["127.0.0.2", "127.0.0.4"]
    assert "pm_guess" not in running.log()


def test_a_request_without_credentials_is_not_counted_as_a_guess(server):
    running = server(agents=["kite"])
    for _ in range(3):
        assert timed_post(running, {})[0] == 401
    assert failing_addresses(running.log()) == []


def test_the_failure_memory_is_bounded_and_forgets():
    from persmem_core.auth.failures import AuthFailures

    now = [0.0]
    throttle = AuthFailures(clock=lambda: now[0])
    delays = [throttle.failed("203.0.113.7") for _ in range(12)]
    assert delays[0] == 0 and delays == sorted(delays) and delays[-1] == AuthFailures.MAX_DELAY
    for i in range(AuthFailures.MAX_ADDRESSES + 500):
        throttle.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(throttle._failures) == AuthFailures.MAX_ADDRESSES
    now[0] += AuthFailures.FORGET_AFTER + 1
    assert throttle.failed("203.0.113.7") == 0 and len(throttle._failures) == 1


def fail2ban_failregex() -> str:
    """The failregex of the filter docs/deploy.md ships."""
    text = DEPLOY_DOC.read_text()
    match = re.search(r"^failregex\s*=\s*(.+)$", text, re.MULTILINE)
    assert match, "docs/deploy.md has no fail2ban failregex"
    return match.group(1).strip()


def as_python_regex(failregex: str) -> re.Pattern:
    # fail2ban cuts the timestamp out of a line before matching, and <HOST> stands for an address.
    return re.compile(failregex.replace("<HOST>", r"(?P<host>[0-9A-Fa-f.:]+)"))


def test_the_fail2ban_filter_in_the_docs_matches_the_servers_failure_lines(server):
    running = server(agents=["kite"])
    timed_post(running, {"Authorization": "Bearer pm_guess"}, source="127.0.0.3")
    # Lines an attacker controls must not match: a path and a Host header carrying the same words.
    words = "x%20WARNING%20persmem.http:/%20persmem%20auth%20failure/%20from%206.6.6.6"  # short segments
    exchange(running, request_bytes(running, b"/" + words.encode(), b"{}", running.headers("kite")))
    exchange(running, request_bytes(running, b"/mcp", b"{}", {"Host": "x WARNING persmem.http: persmem auth "
                                                                      "failure from 6.6.6.6"}))
    time.sleep(0.2)
    regex = as_python_regex(fail2ban_failregex())
    timestamp = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")
    lines = [line for line in running.log().splitlines() if timestamp.match(line)]
    assert any("Invalid Host header: x WARNING persmem.http" in line for line in lines)
    # As fail2ban sees them: from a log file with the timestamp cut out, and from the journal (backend =
    # systemd), where the line follows the host and the unit's name and keeps its own timestamp.
    for seen in ([timestamp.sub("", line, count=1) for line in lines], [f"box persmem[42]: {line}" for line in lines]):
        hosts = [m.group("host") for line in seen if (m := regex.search(line))]
        assert hosts == ["127.0.0.3"]


# -- streams that outlive their credential ------------------------------------------------------------------

class EventReader(threading.Thread):
    """Reads an SSE stream in the background, noting each event and when the stream ended."""

    def __init__(self, url: str, headers: dict[str, str]):
        super().__init__(daemon=True)
        self.url, self.headers = url, headers
        self.events: list[tuple[str, dict]] = []
        self.first = threading.Event()
        self.ended_at: float | None = None
        self.status: int | None = None

    def run(self) -> None:
        try:
            with httpx2.stream("GET", self.url, headers=self.headers, timeout=30) as response:
                self.status = response.status_code
                event = None
                self.first.set()
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        event = line.split(":", 1)[1].strip()
                    elif line.startswith("data:"):
                        self.events.append((event, json.loads(line.split(":", 1)[1])))
        except httpx2.HTTPError:
            pass
        finally:
            self.ended_at = time.monotonic()
            self.first.set()


def send_mail(server, sender: str, to: str, subject: str) -> None:
    server.call_tool("amq_send", {"to_agent": to, "body": f"body of {subject}",
                                  "subject": subject}, agent=sender)


def test_revoking_an_agent_ends_its_open_event_stream(server):
    running = server(agents=["kite", "wren"])
    kite = EventReader(running.base_url + "/amq/events", running.headers("kite"))
    wren = EventReader(running.base_url + "/amq/events", running.headers("wren"))
    kite.start(), wren.start()
    assert kite.first.wait(10) and wren.first.wait(10)
    send_mail(running, "wren", "kite", "before")
    deadline = time.monotonic() + 10
    while not any(e == "message" for e, _ in kite.events) and time.monotonic() < deadline:
        time.sleep(0.05)
    revoked_at = time.monotonic()
    AgentStore(running.home).revoke("kite")
    send_mail(running, "wren", "kite", "after revocation")
    kite.join(5)
    assert kite.ended_at is not None and kite.ended_at - revoked_at < 1.5
    subjects = [data.get("subject") for event, data in kite.events if event == "message"]
    assert subjects == ["before"]
    assert all("after revocation" not in json.dumps(data) for _, data in kite.events)
    assert wren.is_alive()  # another agent's stream goes on
    assert httpx2.get(running.base_url + "/amq/events", headers=running.headers("kite"), timeout=10).status_code == 401


def test_rotating_a_token_ends_streams_opened_with_the_old_one(server):
    running = server(agents=["kite"])
    kite = EventReader(running.base_url + "/amq/events", running.headers("kite"))
    kite.start()
    assert kite.first.wait(10) and kite.status == 200
    time.sleep(0.3)
    rotated_at = time.monotonic()
    AgentStore(running.home).add("kite", replace=True)
    kite.join(5)
    assert kite.ended_at is not None and kite.ended_at - rotated_at < 1.5


def test_revoking_an_agent_ends_its_mcp_get_stream(server):
    running = server(agents=["kite"], json_response=False)
    opened = httpx2.post(running.url, headers={**MCP_HEADERS, **running.headers("kite")}, json=INIT, timeout=10)
    session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    httpx2.post(running.url, headers={**MCP_HEADERS, **running.headers("kite"), **session},
                json={"jsonrpc": "2.0", "method": "notifications/initialized"}, timeout=10)
    stream = EventReader(running.url, {"Accept": "text/event-stream", **running.headers("kite"), **session})
    stream.start()
    assert stream.first.wait(10) and stream.status == 200
    time.sleep(0.3)
    assert stream.is_alive()
    revoked_at = time.monotonic()
    AgentStore(running.home).revoke("kite")
    stream.join(5)
    assert stream.ended_at is not None and stream.ended_at - revoked_at < 1.5


# -- malformed bodies ---------------------------------------------------------------------------------------

def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


MALFORMED_BODIES = {
    "nested arguments": b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"persmem_whoami",'
    b'"arguments":{"a":' + nested(100_000).encode() + b"}}}",
    "nested array": nested(100_000).encode(),
    "nested object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "not json": b"not json",
    "bad utf-8": b'{"jsonrpc":"2.0","id":2,"method":"ping","x":"\xff\xfe"}',
    "huge number": b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}',
    "empty": b"",
}


def test_malformed_mcp_bodies_get_a_clear_400_and_the_server_stays_up(server):
    running = server(agents=["kite"], max_body_bytes=1_000_000)
    headers = {**MCP_HEADERS, **running.headers("kite")}
    opened = httpx2.post(running.url, headers=headers, json=INIT, timeout=10)
    session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    for name, body in MALFORMED_BODIES.items():
        answer = httpx2.post(running.url, headers={**headers, **session}, content=body, timeout=30)
        assert answer.status_code == 400, name
        error = answer.json()["error"]
        assert error["code"] == -32700 and error["message"].startswith("Parse error: "), (name, error)
    assert running.call_tool("persmem_whoami", agent="kite")["agent"] == "kite"
    assert "Traceback" not in running.log()
