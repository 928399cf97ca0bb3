"""AMQ mail: send and read throughput and p95 latency with full durability (fsync of the file and of the
folder before a send or read is acknowledged), side by side with Python's stdlib `mailbox.Maildir`
(which does not fsync) in the same run, on the same disk.

Three layers:
- files:   persmem's MailStore in-process vs stdlib mailbox.Maildir in-process (same message sizes);
- listing: amq_check's work with N unread messages in the inbox (parsed headers are cached);
- MCP:     amq_send / amq_read / amq_check through a real MCP Streamable HTTP client and server.
"""

from __future__ import annotations

import argparse
import email.message
import mailbox
import statistics
import sys
import tempfile
import time
from pathlib import Path

BODY = "Round 2: I checked the cache plan. " * 12  # ~430 bytes, a typical exchange-loop message


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def timed(fn, items) -> tuple[float, list[float]]:
    lat = []
    start = time.perf_counter()
    for item in items:
        t = time.perf_counter()
        fn(item)
        lat.append((time.perf_counter() - t) * 1000)
    return len(lat) / (time.perf_counter() - start), lat


def bench_files(n: int) -> list[tuple]:
    from persmem_amq_maildir.config import AmqConfig
    from persmem_amq_maildir.store import MailStore

    rows = []
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        store = MailStore(Path(tmp) / "amq", AmqConfig(agents=["kite", "wren"])).open()
        rate, lat = timed(lambda i: store.send("kite", "wren", BODY, subject=f"m{i}"), range(n))
        ids = [e.id for e in store.box("wren").scan(("new",))[0]]
        read_rate, read_lat = timed(lambda i: store.read("wren", "", i), ids)

        md = mailbox.Maildir(Path(tmp) / "stdlib", create=True)

        def std_send(i):
            msg = email.message.EmailMessage()
            msg["From"], msg["To"], msg["Subject"] = "kite", "wren", f"m{i}"
            msg.set_content(BODY)
            md.add(msg)

        std_rate, std_lat = timed(std_send, range(n))

        def std_read(key):
            msg = md.get_message(key)
            msg.get_payload()
            msg.set_subdir("cur")
            md[key] = msg  # the stdlib's way to mark a message read

        std_read_rate, std_read_lat = timed(std_read, list(md.keys()))
    rows.append(("send, in-process", n, rate, pct(lat, 50), pct(lat, 95), std_rate, pct(std_lat, 95)))
    rows.append(("read + mark read, in-process", n, read_rate, pct(read_lat, 50), pct(read_lat, 95),
                 std_read_rate, pct(std_read_lat, 95)))
    return rows


def bench_listing(n: int, runs: int) -> tuple:
    from persmem_amq_maildir.config import AmqConfig
    from persmem_amq_maildir.store import MailStore

    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        store = MailStore(Path(tmp) / "amq", AmqConfig(agents=["kite", "wren"])).open()
        for i in range(n):
            store.send("kite", "wren", BODY, subject=f"m{i}")
        cold = time.perf_counter()
        store.check("wren")
        cold = (time.perf_counter() - cold) * 1000
        _, lat = timed(lambda _: store.check("wren"), range(runs))
        md = mailbox.Maildir(Path(tmp) / "stdlib", create=True)
        for i in range(n):
            md.add(f"Subject: m{i}\n\n{BODY}")
        _, std_lat = timed(lambda _: [m["subject"] for m in md.itervalues()], range(max(3, runs // 10)))
    return ("check (list unread headers)", n, 1000 / statistics.median(lat), pct(lat, 50), pct(lat, 95),
            1000 / statistics.median(std_lat), pct(std_lat, 95), cold)


def bench_mcp(n: int) -> list[tuple]:
    import anyio

    from persmem_core.testing import clean_env, start_server
    from persmem_core.transport.tool_answers import tool_result

    home = Path(tempfile.mkdtemp(prefix="persmem-bench-amq-"))
    server = start_server(home, agents=("kite", "wren"), env=clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw"))
    try:
        async def run():
            async with server.client("kite") as kite, server.client("wren") as wren:
                send_lat, read_lat, check_lat = [], [], []
                start = time.perf_counter()
                for i in range(n):
                    t = time.perf_counter()
                    tool_result(await kite.call_tool("amq_send", {"to_agent": "wren",
                                                                  "body": BODY, "subject": f"m{i}"}))
                    send_lat.append((time.perf_counter() - t) * 1000)
                send_rate = n / (time.perf_counter() - start)
                t = time.perf_counter()
                ids = [m["id"] for m in tool_result(await wren.call_tool("amq_check", {}))["messages"]]
                check_lat.append((time.perf_counter() - t) * 1000)
                start = time.perf_counter()
                for msg_id in ids:
                    t = time.perf_counter()
                    tool_result(await wren.call_tool("amq_read", {"agent": "wren", "msg_id": msg_id}))
                    read_lat.append((time.perf_counter() - t) * 1000)
                read_rate = len(ids) / (time.perf_counter() - start)
                return send_rate, send_lat, read_rate, read_lat

        send_rate, send_lat, read_rate, read_lat = anyio.run(run)
    finally:
        server.stop()
    return [("amq_send through MCP HTTP", n, send_rate, pct(send_lat, 50), pct(send_lat, 95), None, None),
            ("amq_read through MCP HTTP", n, read_rate, pct(read_lat, 50), pct(read_lat, 95), None, None)]


def main(quick: bool = False, n: int | None = None) -> list:
    n = n or (200 if quick else 2000)
    rows = bench_files(n) + bench_mcp(min(n, 100 if quick else 500))
    listing = bench_listing(min(n, 1000), 20 if quick else 200)
    print(f"\nAMQ (fsync file + folder on every send and read; stdlib mailbox.Maildir does not fsync; {n} messages "
          f"of {len(BODY)} bytes)\n")
    print("| operation | messages | persmem ops/s | persmem p50 ms | persmem p95 ms | stdlib ops/s | stdlib p95 ms |")
    print("|---|---|---|---|---|---|---|")
    for name, count, rate, p50, p95, std_rate, std_p95 in rows + [listing[:7]]:
        std = f"{std_rate:,.0f} | {std_p95:.2f}" if std_rate else "- | -"
        print(f"| {name} | {count:,} | {rate:,.0f} | {p50:.2f} | {p95:.2f} | {std} |")
    print(f"\nfirst check of {listing[1]:,} unread (nothing cached yet): {listing[7]:.1f} ms")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("-n", type=int, default=None, help="messages per measurement (default 2000)")
    args = parser.parse_args()
    sys.exit(main(args.quick, args.n) and 0)
