"""Ambient memory (the sessions plugin): what a Claude Code / Codex user waits for, and what the store holds.

All against a real `persmem serve` with a realistic store (identity and directive entries, a handoff per
project, curated memories across 10 projects from LoCoMo turns, sessions already captured):
- hook process wall time p50 / p95 for SessionStart and UserPromptSubmit: the command `persmem hooks install`
  writes (`python -I -S -c "import persmem_sessions.hook ..."`) as its own process, the event's JSON on stdin,
  as the clients run it (process start, the socket round trip and the server's work included); target p95 <=
  1.5 x a bare `python3 -c pass` of the same python, measured in the same loop (one baseline run after each hook
  run, so both see the same load), printed with /usr/bin/python3's too; and the part of it spent waiting for the
  server (the hook's own PERSMEM_HOOK_DEBUG line: from its start, imports done, to its answer);
- briefing size in tokens (ceil(characters / 4), as the server counts), median and max, against the budget;
- capture throughput in turns/s through the HTTP API (bearer token over TCP, batches as the hooks send them),
  counted until every turn is indexed (searchable), and until archived alone;
- session_search p50 / p95 over N turns (default 100,000; `--turns`), through a real MCP client over HTTP. The
  turns are captured through the sessions service in this process (the same capture and indexing code, without
  one HTTP request per session), then the server is started on that home. Embedding dominates the build
  (about 300 turns/s here): the printed size is the size measured.

Run: python benchmarks/bench_sessions.py [--quick] [--turns N] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import httpx2

from bench_data import LOCOMO  # noqa: E402 - ../shared/data, or PERSMEM_LOCOMO
PROJECTS = ["billing", "infra", "heron", "atlas", "search", "mobile", "ledger", "docs", "auth", "etl"]
AGENT = "bench"
HOOK_P95_TARGET_RATIO = 1.5  # the hook process against a bare `python -c pass`, p95
SYSTEM_PYTHON = "/usr/bin/python3"


# -- data ----------------------------------------------------------------------------------------------------------

def locomo() -> tuple[list[str], list[str]]:
    data = json.loads(LOCOMO.read_text())
    turns = [t["text"] for conv in data for k, v in conv["conversation"].items()
             if k.startswith("session_") and isinstance(v, list) for t in v]
    questions = [qa["question"] for conv in data for qa in conv["qa"]]
    return turns, questions


def session_lines(session_id: str, cwd: str, texts: list[str]) -> list[str]:
    """A Claude Code 2.0 transcript: the texts as alternating prompts and answers, a Bash call and its result
    after every fourth answer (so a turn in ten or so is a tool's)."""
    lines, parent = [], None
    for i, text in enumerate(texts):
        uid = str(uuid.uuid4())
        common = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": cwd,
                  "sessionId": session_id, "version": "2.0.14", "gitBranch": "main", "uuid": uid,
                  "timestamp": f"2025-10-{1 + i % 28:02d}T09:{i % 60:02d}:00.000Z"}
        if i % 2 == 0:
            lines.append(json.dumps({**common, "type": "user", "message": {"role": "user", "content": text}}))
        else:
            content = [{"type": "text", "text": text}]
            if i % 8 == 7:
                content.append({"type": "tool_use", "id": f"toolu_{uid[:8]}", "name": "Bash",
                                "input": {"command": f"rg -n '{text.split()[0]}' src/"}})
            message = {"role": "assistant", "model": "claude-sonnet-4-5", "content": content}
            lines.append(json.dumps({**common, "type": "assistant", "message": message}))
            if len(content) > 1:
                lines.append(json.dumps({**common, "uuid": str(uuid.uuid4()), "type": "user", "message": {
                    "role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{uid[:8]}",
                                                 "content": f"src/app.py:{i}: {text[:80]}"}]}}))
        parent = uid
    return lines


def sessions_of(n_turns: int, per_session: int, texts: list[str], offset: int = 0):
    """(session id, cwd, lines, turns) for about `n_turns` turns, `per_session` texts a session."""
    out, used, k = [], 0, 0
    while used < n_turns:
        chunk = [f"{texts[(offset + used + j) % len(texts)]} (s{k})" for j in range(per_session)]
        cwd = f"/home/me/src/{PROJECTS[k % len(PROJECTS)]}"
        lines = session_lines(str(uuid.uuid4()), cwd, chunk)
        turns = per_session + sum('"tool_use"' in line for line in lines) * 2  # a call and its result
        out.append((json.loads(lines[0])["sessionId"], cwd, lines, turns))
        used += turns
        k += 1
    return out


def plugin_env() -> dict[str, str]:
    from importlib import metadata

    try:
        metadata.distribution("persmem-plugin-sessions")
        return {}
    except metadata.PackageNotFoundError:
        return {"PERSMEM_PLUGIN_MODULES": "persmem_sessions.plugin",
                "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "plugins" / "sessions")}


def server_env(home: Path) -> dict[str, str]:
    from persmem_core.testing import clean_env

    # every tool set: the seed writes identity and directive entries with bootstrap_update (the chorus set)
    return clean_env(home, PERSMEM_DISABLE_PLUGINS="shell,git,searxng", PERSMEM_DEFAULT_TOOL_SETS="all",
                     **plugin_env())


# -- the realistic store ---------------------------------------------------------------------------------------------

def seed(server, texts: list[str], n_memories: int) -> None:
    async def run():
        async with server.client(AGENT) as client:
            for entry_id, kind, content in (
                    (f"{AGENT}-identity", "identity", "You are bench, the platform team's coding assistant. You "
                     "keep changes small, run the tests before saying done, and write a handoff at the end."),
                    (f"{AGENT}-directive", "directive", "Never deploy on Fridays. Ask before deleting data. "
                     "Prefer the existing libraries over new dependencies.")):
                r = await client.call_tool("bootstrap_update", {"entry_id": entry_id, "content": content,
                                                                "entry_type": kind})
                assert not r.is_error, r.content[0].text
            chunks = [{"content": f"Handoff for {p}: the retry work is merged; next, the flaky {p} integration test "
                       f"on slow disks and the {p} dashboard's empty state.", "type": "handoff", "project": p}
                      for p in PROJECTS]
            chunks += [{"content": f"{texts[i % len(texts)]} (note {i})", "project": PROJECTS[i % len(PROJECTS)],
                        "type": ["decision", "fact", "bug", "note"][i % 4]} for i in range(n_memories)]
            for i in range(0, len(chunks), 500):
                r = await client.call_tool("memory_bulk_store", {"chunks": chunks[i:i + 500], "dedup": False,
                                                                 "context_chars": 0})
                assert not r.is_error, r.content[0].text

    anyio.run(run)


# -- measures ----------------------------------------------------------------------------------------------------------

def timed(command: list[str], env: dict, stdin: str = "") -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, input=stdin, env=env, capture_output=True, text=True, timeout=30)
    return time.perf_counter() - start, done


def hook_runs(server, event: str, runs: int, prompts: list[str]) -> dict[str, list]:
    """`runs` hook processes for `event`, each followed by the bare baselines (`python -c pass` of the hook's
    python and of the system's): their wall times (s), the hook's time waiting for the server (s, from its debug
    line) and the size in tokens of what it printed."""
    import re
    import shlex

    from persmem_sessions.installer import hook_command

    command = shlex.split(hook_command("claude", server.home, AGENT))
    python = command[0]
    env = {k: v for k, v in server.env.items() if k != "PERSMEM_HOME"} | {"PERSMEM_HOOK_DEBUG": "1"}
    out = {"hook": [], "server": [], "tokens": [], "python": [], "system": []}
    for i in range(-2, runs):  # two warm-up runs first (the server loads its embedding model on first use)
        project = PROJECTS[i % len(PROJECTS)]
        payload = {"session_id": str(uuid.uuid4()), "transcript_path": None, "cwd": f"/home/me/src/{project}",
                   "hook_event_name": event, "permission_mode": "default"}
        payload |= {"source": "startup"} if event == "SessionStart" else {"prompt": prompts[i % len(prompts)]}
        took, done = timed(command, env, json.dumps(payload))
        if i < 0:
            continue
        assert done.returncode == 0 and " ok, " in done.stderr, done.stderr
        out["hook"].append(took)
        out["server"].append(float(re.search(r" in (\d+) ms", done.stderr).group(1)) / 1000)
        context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] if done.stdout.strip() else ""
        out["tokens"].append(math.ceil(len(context) / 4))
        out["python"].append(timed([python, "-c", "pass"], env)[0])
        if Path(SYSTEM_PYTHON).exists():
            out["system"].append(timed([SYSTEM_PYTHON, "-c", "pass"], env)[0])
    return out


def archived_metas(home: Path) -> list:
    """The home's session metadata (sealed when [encryption] is on: opened with the home's key)."""
    from persmem_core.host import Host
    from persmem_sessions.archive import decode_meta

    sealer = Host(environ=server_env(home)).sealer
    return [decode_meta(p, p.read_bytes(), sealer) for p in (home / "sessions" / AGENT).glob("*/*.meta.json")]


def wait_indexed(home: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metas = archived_metas(home)
        if metas and all(m.indexed_lines >= m.lines for m in metas):
            return
        time.sleep(0.05)
    raise RuntimeError("turns were not indexed in time")


def capture_throughput(server, texts: list[str], n_turns: int) -> tuple[float, float, int]:
    """Turns/s archived (until the last capture answered) and indexed (until every turn is searchable)."""
    from persmem_sessions.hook import batches

    sessions = sessions_of(n_turns, 20, texts, offset=1000)
    headers = {"Authorization": f"Bearer {server.tokens[AGENT]}"}
    start = time.perf_counter()
    with httpx2.Client(base_url=server.base_url, headers=headers, timeout=120) as http:
        for session_id, cwd, lines, _ in sessions:
            first = http.get(f"/sessions/capture/claude/{session_id}").json()["lines"]
            for batch in batches(lines[first:]):
                r = http.post("/sessions/capture", json={"client": "claude", "session_id": session_id, "cwd": cwd,
                                                         "first_line": first, "lines": batch, "event": "Stop"})
                assert r.status_code == 200, r.text
                first += len(batch)
    archived_s = time.perf_counter() - start
    wait_indexed(server.home, 1800)
    indexed_s = time.perf_counter() - start
    turns = sum(s[3] for s in sessions)
    return turns / archived_s, turns / indexed_s, turns


def build_turns(home: Path, texts: list[str], n_turns: int) -> tuple[int, float]:
    """Capture about `n_turns` turns through the sessions service in this process and wait for them to be
    indexed; returns the turns and the seconds it took."""
    from persmem_core.host import Host
    from persmem_sessions.service import service

    host = Host(environ=server_env(home))
    host.startup()
    try:
        sessions = service(host)
        start = time.perf_counter()
        made = 0
        for session_id, cwd, lines, turns in sessions_of(n_turns, 100, texts):
            sessions.capture(AGENT, "claude", session_id, cwd, 0, lines)
            made += turns
        while sessions.pending():
            time.sleep(0.5)
        return made, time.perf_counter() - start
    finally:
        host.shutdown()


def search_times(server, queries: list[str]) -> list[float]:
    async def run():
        times = []
        async with server.client(AGENT) as client:
            for i, query in enumerate(queries):
                args = {"query": query, "top_k": 5} | ({"project": PROJECTS[i % len(PROJECTS)]} if i % 2 else {})
                start = time.perf_counter()
                r = await client.call_tool("session_search", args)
                times.append(time.perf_counter() - start)
                assert not r.is_error, r.content[0].text
        return times

    return anyio.run(run)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main(quick: bool = False, turns: int | None = None, runs: int | None = None) -> list[tuple[str, str, str]]:
    from persmem_core.net.addresses import free_port
    from persmem_core.testing import start_server
    from persmem_core.transport.server_process import RunningServer

    texts, questions = locomo()
    runs = runs or (10 if quick else 50)
    n_memories = 200 if quick else 5000
    n_capture = 300 if quick else 5000
    n_search = turns or (1000 if quick else 100_000)
    budget = 2000

    home = Path(tempfile.mkdtemp(prefix="persmem-bench-sessions-"))
    server = start_server(home, (AGENT,), server_env(home))
    try:
        seed(server, texts, n_memories)
        sessions_of_store = sessions_of(300 if quick else 2000, 20, texts, offset=50_000)  # captured before
        with httpx2.Client(base_url=server.base_url, timeout=120,
                           headers={"Authorization": f"Bearer {server.tokens[AGENT]}"}) as http:
            for session_id, cwd, lines, _ in sessions_of_store:
                http.post("/sessions/capture", json={"client": "claude", "session_id": session_id, "cwd": cwd,
                                                     "first_line": 0, "lines": lines, "event": "Stop"})
        wait_indexed(home, 600)
        start_runs = hook_runs(server, "SessionStart", runs, questions)
        prompt_runs = hook_runs(server, "UserPromptSubmit", runs, questions[200:])
        archived_rate, indexed_rate, captured = capture_throughput(server, texts, n_capture)
    finally:
        server.stop()

    search_home = Path(tempfile.mkdtemp(prefix="persmem-bench-sessions-search-"))
    first = start_server(search_home, (AGENT,), server_env(search_home))
    first.stop()  # the agent exists; the build below owns the home
    built, build_s = build_turns(search_home, texts, n_search)
    server = RunningServer(search_home, server_env(search_home), free_port(), first.tokens).start()
    try:
        times = search_times(server, questions[:40] if quick else questions[:200])
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(search_home, ignore_errors=True)

    def ms(values, q):
        return f"{pct(values, q) * 1000:.0f} ms"

    rows = []
    for name, measured in (("SessionStart", start_runs), ("UserPromptSubmit", prompt_runs)):
        ratio = pct(measured["hook"], .95) / pct(measured["python"], .95)
        rows += [
            (f"{name} hook process, p50 / p95", f"{ms(measured['hook'], .5)} / {ms(measured['hook'], .95)}",
             f"p95 <= {HOOK_P95_TARGET_RATIO} x python -c pass"),
            (f"  bare `{Path(sys.executable).name} -c pass` (the hook's python), p50 / p95",
             f"{ms(measured['python'], .5)} / {ms(measured['python'], .95)}",
             f"hook / bare, p95: {ratio:.2f}x {'ok' if ratio <= HOOK_P95_TARGET_RATIO else 'OVER'}"),
        ]
        if measured["system"]:
            rows.append((f"  bare `{SYSTEM_PYTHON} -c pass`, p50 / p95",
                         f"{ms(measured['system'], .5)} / {ms(measured['system'], .95)}",
                         f"hook / bare, p95: {pct(measured['hook'], .95) / pct(measured['system'], .95):.2f}x"))
        rows.append(("  of which waiting for the server's answer, p50 / p95",
                     f"{ms(measured['server'], .5)} / {ms(measured['server'], .95)}", "-"))
    start_tokens = start_runs["tokens"]
    rows += [
        ("briefing tokens, median / max", f"{statistics.median(start_tokens):.0f} / {max(start_tokens)}",
         f"<= {budget} (budget)"),
        (f"capture through HTTP, {captured:,} turns: archived", f"{archived_rate:,.0f} turns/s", "-"),
        (f"capture through HTTP, {captured:,} turns: archived and indexed", f"{indexed_rate:,.0f} turns/s", "-"),
        (f"session_search over {built:,} turns (MCP HTTP), p50 / p95", f"{ms(times, .5)} / {ms(times, .95)}", "-"),
        (f"building {built:,} turns in process (capture + indexing)", f"{built / build_s:,.0f} turns/s", "-"),
    ]
    print(f"\n## Sessions (hooks: {runs} runs each; store: {n_memories:,} memories, {len(sessions_of_store)} "
          f"sessions; search: {len(times)} queries, half with a project)\n")
    print("| measure | result | target |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the benchmark still runs")
    parser.add_argument("--turns", type=int, help="turns to search over (default 100,000; 1,000 with --quick)")
    parser.add_argument("--runs", type=int, help="hook processes per event (default 50)")
    args = parser.parse_args()
    main(args.quick, args.turns, args.runs)
