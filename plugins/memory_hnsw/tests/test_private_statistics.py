"""What another agent writes into a private collection never moves the scores of a search (issue 32, Low).

Before, BM25's statistics (document frequencies, document count, average length) came from every row of a
collection, so wren's keyword search of its own session turns scored differently once kite's private turns used
the query's words: wren could confirm guesses about kite's sessions (store a turn with the guessed word, search,
compare). Through a real `persmem serve` and MCP client: wren's searches (memory_search of `sessions` in every
mode, memory_search of the shared collection with include_sessions, session_search) answer exactly the same
before and after kite's turns full of the guessed words are captured.
"""

from __future__ import annotations

import pytest

from persmem_core.sdk.testing import start_server, write_config

from test_private_collections import capture_turns

GUESS = "albatross"
WREN_TURNS = ["the albatross deploy key is rotated quarterly in the ops vault",
              "we moved the ops vault to the new cluster last week",
              "deploy freezes start on fridays at noon",
              "the albatross cache needs a warm start after each deploy",
              "who rotates the deploy key when the ops team is away?"]
KITE_TURNS = [f"albatross albatross {word} albatross project secret key" for word in
              ("falcon", "heron", "osprey", "kestrel", "merlin", "plover", "tern", "gannet")]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    write_config(home, {"memory": {"editors": {"wren": ["*"]}}})
    running = start_server(home, agents=("kite", "wren"))
    capture_turns(running, "wren", "wren-s1", WREN_TURNS)
    running.call_tool("memory_store", {"content": "The albatross deploy key stays in the ops vault.",
                                       "project": "acme"}, agent="wren")
    capture_turns(running, "kite", "kite-s0", ["an unrelated first turn about lunch"])
    yield running
    running.stop()


SEARCHES = [("memory_search", {"query": f"{GUESS} deploy key vault", "collection": "sessions", "mode": mode,
                               "verbose": True, "top_k": 10}) for mode in ("lexical", "hybrid", "dense")]
SEARCHES += [("memory_search", {"query": f"{GUESS} key", "include_sessions": True, "verbose": True, "top_k": 10}),
             ("session_search", {"query": f"{GUESS} deploy key", "top_k": 10})]


def answers(server):
    """What wren's searches return: ids, scores and every sub-score, in order."""
    out = []
    for result in server.call_tools(SEARCHES, agent="wren"):
        items = result["results"]
        out.append([{k: item.get(k) for k in ("id", "score", "lexical_score", "distance", "index", "session_id")}
                    for item in items])
    return out


def test_another_agents_private_turns_never_move_a_search_score(server):
    before = answers(server)
    assert before[0] and all(item["lexical_score"] for item in before[0])  # the keyword side found wren's turns
    capture_turns(server, "kite", "kite-s1", KITE_TURNS)  # kite's private turns, full of the guessed word
    after = answers(server)
    assert after == before
    found = server.call_tool("memory_search", {"query": GUESS, "collection": "sessions", "top_k": 20},
                             agent="kite")
    assert len(found["results"]) >= len(KITE_TURNS)  # kite's own search sees them (by kite's own statistics)
