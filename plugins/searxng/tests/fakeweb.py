"""A local web: SearXNG's /search (recorded answer shape) and a few pages, for the web tool tests."""

import gzip
import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from persmem_core.sdk.testing import clean_env, start_server, write_config

# The shape of a real SearXNG /search?format=json answer (recorded from SearXNG 2025.x), trimmed.
RECORDED = {
    "query": "", "number_of_results": 0,
    "results": [
        {"url": "https://docs.python.org/3/library/mailbox.html", "title": "mailbox — Manipulate mailboxes",
         "content": "This module defines two classes, Mailbox and Message, for accessing and manipulating on-disk "
                    "mailboxes and the messages they contain.",
         "engine": "duckduckgo", "parsed_url": ["https", "docs.python.org", "/3/library/mailbox.html", "", "", ""],
         "template": "default.html", "engines": ["duckduckgo", "brave"], "positions": [1, 1], "score": 4.0,
         "category": "general", "publishedDate": None, "thumbnail": ""},
        {"url": "https://en.wikipedia.org/wiki/Maildir", "title": "Maildir - Wikipedia",
         "content": "The Maildir e-mail format is a common way of storing email messages on a file system.",
         "engine": "brave", "engines": ["brave"], "positions": [2], "score": 1.0, "category": "general"},
        {"title": "no url, skipped", "content": "x"},
        {"url": "https://cr.yp.to/proto/maildir.html", "title": "Using maildir format", "content": "",
         "engines": ["qwant"], "positions": [3], "score": 0.5, "category": "general"},
    ],
    "answers": [], "corrections": [], "infoboxes": [], "suggestions": ["maildir vs mbox"],
    "unresponsive_engines": [["google", "timeout"]],
}

ARTICLE = ("<html><head><title>Maildir explained</title></head><body><nav>Home | About | Login</nav>"
           "<article><h1>Maildir explained</h1>" + "<p>Each message is one file; delivery is atomic. </p>" * 20 +
           "<p>The end.</p></article><footer>(c) someone</footer><script>alert('x')</script></body></html>")


GZIP_BOMB = gzip.compress(b"a" * 20_000_000, 9)  # 20 MB of text in ~20 KB
DRIP_SECONDS = 0.5


class FakeWeb(BaseHTTPRequestHandler):
    """SearXNG's /search plus a few pages for web_fetch; the query or path picks the behaviour."""

    seen: list = []
    internal_url = ""
    hung_up: dict = {}  # path -> (time.monotonic() when the client closed the connection, bytes sent by then)

    def log_message(self, *args):
        pass

    def send(self, code, body: bytes, ctype="text/html; charset=utf-8", headers=None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        url = urlparse(self.path)
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        FakeWeb.seen.append((url.path, params, self.headers.get("Host")))
        if url.path == "/search":
            q = params.get("q", "")
            if params.get("format") != "json" or q == "force 403":
                return self.send(403, b"Forbidden", "text/plain")
            if q == "force slow":
                time.sleep(3)
            if q == "force html":
                return self.send(200, b"<html>not json</html>")
            return self.send(200, json.dumps(RECORDED | {"query": q}).encode(), "application/json")
        if url.path == "/page.html":
            return self.send(200, ARTICLE.encode())
        if url.path == "/plain.txt":
            return self.send(200, b"just text\n" * 5, "text/plain")
        if url.path == "/big.txt":
            return self.send(200, b"y" * 3_000_000, "text/plain")
        if url.path == "/image.png":
            return self.send(200, b"\x89PNG\r\n\x1a\n", "image/png")
        if url.path == "/go-page":
            return self.send(302, b"", headers={"Location": "/page.html"})
        if url.path == "/go-internal":
            return self.send(302, b"", headers={"Location": FakeWeb.internal_url})
        if url.path == "/loop":
            return self.send(302, b"", headers={"Location": "/loop"})
        if url.path == "/secret":
            return self.send(200, b"INTERNAL SECRET", "text/plain")
        if url.path in HOSTILE:
            return HOSTILE[url.path](self)
        return self.send(404, b"nope", "text/plain")


    # Hostile servers: each one tries to hold web_fetch past its deadline or to make it hold too much.

    def sent_until_hang_up(self, parts):
        """Write the parts until the client hangs up; note when, and how many bytes went out by then."""
        sent = 0
        try:
            for part in parts:
                self.wfile.write(part)
                sent += len(part)
        except OSError:
            FakeWeb.hung_up[urlparse(self.path).path] = (time.monotonic(), sent)

    def drip(self, data: bytes):
        for i in range(len(data)):
            yield data[i:i + 1]
            time.sleep(DRIP_SECONDS)

    def drip_body(self):
        """Headers at once, then one byte of the body every half second."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "100")
        self.end_headers()
        self.sent_until_hang_up(self.drip(b"x" * 100))

    def drip_headers(self):
        """The status line, then the headers one byte every half second."""
        self.sent_until_hang_up(itertools.chain([b"HTTP/1.1 200 OK\r\n"],
                                                self.drip(b"X-Slow: " + b"s" * 100 + b"\r\n\r\n")))

    def slow_hops(self):
        """/slow-hop/N answers after 0.8 s with a redirect to /slow-hop/N-1; /slow-hop/0 is the page."""
        left = int(urlparse(self.path).path.rsplit("/", 1)[1])
        time.sleep(0.8)
        if left:
            return self.send(302, b"", headers={"Location": f"/slow-hop/{left - 1}"})
        return self.send(200, b"arrived", "text/plain")

    def gzip_bomb(self):
        self.send(200, GZIP_BOMB, "text/plain", headers={"Content-Encoding": "gzip"})

    def gzip_then_garbage(self):
        """A small gzip member, then 100 MB of bytes that are no gzip member (zlib keeps them as unused data)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Encoding", "gzip")
        self.end_headers()  # no Content-Length: the body ends when the connection closes
        self.sent_until_hang_up(itertools.chain([gzip.compress(b"hello")], itertools.repeat(b"x" * 65536, 1600)))

    def huge_headers(self):
        self.send(200, b"hi", "text/plain", headers={"X-Big": "a" * 200_000})

    def not_gzip(self):
        self.send(200, b"this is not gzip at all", "text/plain", headers={"Content-Encoding": "gzip"})

    def idna_charset(self):
        self.send(200, b"hello in an odd charset", "text/plain; charset=idna")


def redirect_to(location: str):
    return lambda self: self.send(302, b"", headers={"Location": location})


HOSTILE = {
    "/drip-body": FakeWeb.drip_body, "/drip-headers": FakeWeb.drip_headers, "/gzip-bomb": FakeWeb.gzip_bomb,
    "/gzip-then-garbage": FakeWeb.gzip_then_garbage, "/huge-headers": FakeWeb.huge_headers,
    "/not-gzip": FakeWeb.not_gzip, "/idna-charset": FakeWeb.idna_charset,
    **{f"/slow-hop/{n}": FakeWeb.slow_hops for n in range(5)},
    "/go-file": redirect_to("file:///etc/passwd"), "/go-gopher": redirect_to("gopher://127.0.0.2:70/"),
    "/go-credentials": redirect_to("http://user:pw@127.0.0.2/page.html"),
    "/go-nowhere": redirect_to("http://[::1"), "/go-port": redirect_to("http://127.0.0.2:99999/"),
}


def serve_on(host: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, 0), FakeWeb)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start(home, searx_url: str, timeout: float = 2.0, prefix: tuple = ()):
    write_config(home, {"searxng": {"url": searx_url, "timeout": timeout, "fetch_allow_networks": ["127.0.0.2/32"],
                                    "fetch_max_bytes": 1_000_000}})
    return start_server(home, ("kite",), clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw,amq_maildir,shell,git"),
                        prefix=prefix)
