"""A local web: SearXNG's /search (recorded answer shape) and a few pages, for the web tool tests."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from persmem_core.testing import clean_env, start_server, write_config

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


class FakeWeb(BaseHTTPRequestHandler):
    """SearXNG's /search plus a few pages for web_fetch; the query or path picks the behaviour."""

    seen: list = []
    internal_url = ""

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
        return self.send(404, b"nope", "text/plain")


def serve_on(host: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, 0), FakeWeb)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start(home, searx_url: str, timeout: float = 2.0):
    write_config(home, {"searxng": {"url": searx_url, "timeout": timeout, "fetch_allow_networks": ["127.0.0.2/32"],
                                    "fetch_max_bytes": 1_000_000}})
    return start_server(home, ("kite",), clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw,amq_maildir,shell,git"))
