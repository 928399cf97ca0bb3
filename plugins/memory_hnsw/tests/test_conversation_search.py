"""What memory_search reads from a query and from stored conversations, through a real server and MCP client:
the times a query names (memories created then rank higher; memory_bulk_store's "created"), a question's answer
found by the question's words (reply_to) above the question itself, and long memories scored by their best
passage. The date parsing itself is checked directly (query_dates.named_ranges is a pure function)."""

import json
from datetime import datetime, timezone

import pytest

from persmem_core.sdk.testing import ToolCallError
from persmem_memory_hnsw.search.query_dates import named_ranges


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from persmem_core.sdk.testing import start_server, write_config

    home = tmp_path_factory.mktemp("home")
    write_config(home, {"memory": {"search_min_relative_score": 0.0}})  # every top_k result comes back
    running = start_server(home, agents=("kite", "wren"))
    yield running
    running.stop()


def call(server, tool, agent="kite", **args):
    return server.call_tool(tool, args, agent=agent)


def ids(server, query, **args):
    return [r["id"] for r in call(server, "memory_search", query=query, **args)["results"]]


NOW = datetime(2026, 11, 26, 15, 30, tzinfo=timezone.utc).timestamp()


def day(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d")


@pytest.mark.parametrize("query, expected", [
    ("What movie did Joanna watch on 1 May, 2022?", [("2022-05-01", "2022-05-02")]),
    ("What was Sam doing on December 4, 2023?", [("2023-12-04", "2023-12-05")]),
    ("the 5th of June 2021", [("2021-06-05", "2021-06-06")]),
    ("deploy notes from 2026-11-01", [("2026-11-01", "2026-11-02")]),
    ("What setback did Melanie face in October 2023?", [("2023-10-01", "2023-11-01")]),
    ("How many times has she gone to the beach in 2023?", [("2023-01-01", "2024-01-01")]),
    ("on March 3", [("2026-03-03", "2026-03-04")]),  # the latest March 3 before now
    ("on December 24", [("2025-12-24", "2025-12-25")]),  # this year's is still to come
    ("what did we decide yesterday", [("2026-11-25", "2026-11-26")]),
    ("what happened last week", [("2026-11-16", "2026-11-23")]),
    ("three days ago", [("2026-11-23", "2026-11-24")]),
    ("2 weeks ago", [("2026-11-12", "2026-11-19")]),
    ("last month's incident", [("2026-10-01", "2026-11-01")]),
    ("last friday", [("2026-11-20", "2026-11-21")]),
    ("what may I deploy", []),  # "may" the verb
    ("the build from 2023", []),  # a bare number is not a year to rank by
    ("on 31 February, 2023", [("2023-02-01", "2023-03-01")]),  # no such day: its month
    ("step 3 may fail", []), ("march 5 miles north", []),  # "may" and "march" in lower case need a year
    ("deployed 2023-05-08T13:56 by kite", [("2023-05-08", "2023-05-09")]),
    ("what changed since 2025", [("2025-01-01", "2026-11-27")]),
    ("1000000 days ago", []), ("99999 months ago", []), ("on 9999-12-31", []), ("in 0000", []),  # no error
])
def test_a_query_names_times(query, expected):
    assert [(day(a), day(b)) for a, b in named_ranges(query, NOW)] == expected


def test_memories_from_the_time_a_query_names_rank_higher(server):
    things = ["a harbour at dawn", "a portrait of the dog", "the garden fence", "a bowl of lemons", "the old barn",
              "a storm over the bay", "my sister's wedding", "the kitchen door", "a field of sunflowers",
              "the city at night", "a self-portrait", "the frozen lake"]
    notes = [{"content": f"Painted {thing}.", "created": f"2023-{month:02d}-14T10:00:00Z", "id": f"paint-{month}"}
             for month, thing in enumerate(things, 1)]
    stored = call(server, "memory_bulk_store", chunks=json.dumps(notes), project="when", context_chars=0)
    assert stored["stored"] == 12
    assert call(server, "memory_get", memory_id="paint-5")["created"].startswith("2023-05-14T10:00")
    assert ids(server, "What did I paint in October 2023?", project="when")[0] == "paint-10"
    assert ids(server, "What did I paint on 14 May, 2023?", project="when")[0] == "paint-5"
    # a note written within days after the day named counts (it may tell of it), one from a month before not
    assert "paint-8" in ids(server, "what did I paint on 9 August 2023", project="when")[:2]
    assert ids(server, "what did I paint on 25 August 2023", project="when")[0] != "paint-8"
    scores = [r["score"] for r in call(server, "memory_search", query="What did I paint in October 2023?",
                                       project="when")["results"]]
    assert all(0.0 <= s <= 1.0 for s in scores)
    # since/until filter on the same time
    assert sorted(ids(server, "painted", project="when", since="2023-06-01", until="2023-07-31")) == \
        ["paint-6", "paint-7"]


def test_created_is_checked(server):
    with pytest.raises(ToolCallError, match=r"chunks\[0\]\.created must be an ISO date"):
        call(server, "memory_bulk_store", chunks=json.dumps([{"content": "x", "created": "last Tuesday"}]))
    with pytest.raises(ToolCallError, match=r"chunks\[1\]\.created .* is in the future"):
        call(server, "memory_bulk_store", chunks=json.dumps([{"content": "x"},
                                                            {"content": "y", "created": "2999-01-01"}]))
    with pytest.raises(ToolCallError, match=r"chunks\[0\]\.created .* is before 1900"):
        call(server, "memory_bulk_store", chunks=json.dumps([{"content": "x", "created": "0001-01-01"}]))
    with pytest.raises(ToolCallError, match=r"chunks\[0\]\.created must be a string"):
        call(server, "memory_bulk_store", chunks=json.dumps([{"content": "x", "created": 1700000000}]))


def test_the_answer_to_a_question_is_found_by_the_question_and_ranks_above_it(server):
    talk = [{"content": 'Calvin said, "Wow, that view looks awesome! What city is it?"', "id": "q"},
            {"content": 'Dave said, "That\'s Boston, Cal! I took this picture last month."', "id": "a"},
            {"content": 'Calvin said, "My new album is almost done, the studio sessions were long."', "id": "x"}]
    call(server, "memory_bulk_store", chunks=json.dumps(talk), project="talk")
    assert ids(server, "Which city is in the photo Dave showed Calvin?", project="talk", mode="lexical")[:2] == \
        ["a", "q"]
    assert call(server, "memory_get", memory_id="a")["content"].startswith("Dave said")  # content unchanged
    # unrelated notes (context_chars=0) do not answer each other's questions
    alone = [dict(t, id=f"{t['id']}-alone") for t in talk]
    call(server, "memory_bulk_store", chunks=json.dumps(alone), project="notes", context_chars=0)
    assert ids(server, "what city is it", project="notes", mode="lexical") == ["q-alone"]


def test_reply_to_survives_export_and_import(server, tmp_path):
    import subprocess

    from persmem_core.sdk.testing import persmem_command

    talk = [{"content": "Did the backup job run on the new storage box?", "id": "bq"},
            {"content": "Yes, nightly at two, all green.", "id": "ba"}]
    call(server, "memory_bulk_store", chunks=json.dumps(talk), project="exp")
    dump = tmp_path / "dump.jsonl"
    subprocess.run([*persmem_command("memory", "export", str(dump)), "--collection", "memories"], env=server.env,
                   check=True, capture_output=True)
    records = {json.loads(line)["id"]: json.loads(line) for line in dump.read_text().splitlines()}
    assert records["ba"]["reply_to"] == "Did the backup job run on the new storage box?"
    assert "reply_to" not in records["bq"]


def test_a_long_memory_is_scored_by_its_best_passage(server):
    paragraphs = [f"Section {i}: routine maintenance log entry number {i}, nothing unusual, checks passed."
                  for i in range(40)]
    paragraphs[33] = "Section 33: the cooling fan of rack seven failed and was replaced by the night shift."
    long_text = "\n".join(paragraphs)
    stored = call(server, "memory_store", content=long_text, project="long", dedup=False)
    assert stored["chunks"] > 3
    call(server, "memory_bulk_store", chunks=json.dumps([
        {"content": "The office coffee machine was descaled."},
        {"content": "New badges were printed for the visitors."}]), project="long", context_chars=0)
    found = call(server, "memory_search", query="a cooling fan failure in a server rack", project="long",
                 mode="dense")
    assert found["results"][0]["id"] == stored["id"]
