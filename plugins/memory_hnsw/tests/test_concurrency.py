"""Several client processes at once against one server; and a server killed with SIGKILL loses nothing it acknowledged."""

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persmem_core.sdk.testing import assert_tools_answer_clearly

HERE = Path(__file__).parent


def test_concurrent_writers_and_readers_from_several_processes(persmem_server):
    server = persmem_server(agents=["kite", "wren"])
    procs = [
        subprocess.Popen([sys.executable, str(HERE / "client_for_concurrency.py"), server.url,
                          server.tokens["kite" if w % 2 else "wren"], str(w), "25"], stdout=subprocess.PIPE, text=True)
        for w in range(4)
    ]
    outputs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert [o["errors"] for o in outputs] == [[], [], [], []]
    ids = [i for o in outputs for i in o["ids"]]
    assert len(ids) == 100 and len(set(ids)) == 100
    stats = server.call_tool("memory_stats", {"project": "conc"}, agent="kite")
    assert stats["count"] == 100 and stats["authors"] == {"kite": 50, "wren": 50}
    server.stop()
    restarted = type(server)(server.home, server.env, server.port, server.tokens).start()
    try:
        assert restarted.call_tool("memory_stats", {"project": "conc"}, agent="kite")["count"] == 100
    finally:
        restarted.stop()


def test_server_killed_with_sigkill_keeps_every_acknowledged_memory(persmem_server):
    server = persmem_server(agents=["kite"])
    ids = [server.call_tool("memory_store", {"content": f"acknowledged fact {i} about the red kite", "dedup": False},
                            agent="kite")["id"] for i in range(20)]
    server.kill()
    restarted = type(server)(server.home, server.env, server.port, server.tokens).start()
    try:
        for memory_id in ids:
            assert restarted.call_tool("memory_get", {"memory_id": memory_id}, agent="kite")["id"] == memory_id
        found = restarted.call_tool("memory_search", {"query": "red kite fact 7", "top_k": 3}, agent="kite")
        assert "fact 7" in found["results"][0]["content"]
    finally:
        restarted.stop()


def test_a_second_writer_on_the_same_data_refuses_clearly(persmem_server, persmem_env):
    server = persmem_server(agents=["kite"])
    result = subprocess.run([sys.executable, "-m", "persmem_core", "memory", "reindex"],
                            env=server.env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "a persmem server is running on this store" in result.stderr


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content=st.one_of(st.text(max_size=3000), st.integers(), st.none(), st.just("\x00\ud7ff\U0010ffff")),
    project=st.one_of(st.text(max_size=80), st.none(), st.just("../../etc")),
    tags=st.one_of(st.text(max_size=200), st.lists(st.text(max_size=10), max_size=5)),
    top_k=st.one_of(st.integers(-3, 40), st.text(max_size=3)),
    context_chars=st.one_of(st.integers(-5, 3000), st.text(max_size=3), st.none()),
)
def test_any_arguments_give_a_result_or_a_clear_error(shared_server, content, project, tags, top_k, context_chars):
    chunks = json.dumps([{"content": content, "project": project}, {"content": "a neighbour", "tags": tags}])
    assert_tools_answer_clearly(shared_server, [
        ("memory_store", {"content": content, "project": project, "tags": tags}),
        ("memory_search", {"query": content, "top_k": top_k, "project": project}),
        ("memory_bulk_store", {"chunks": chunks, "context_chars": context_chars, "dedup": False}),
    ], "kite")
