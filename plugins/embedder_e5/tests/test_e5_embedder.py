"""The e5-small-q4 embedder as the memory plugin uses it: a real `persmem serve` with
`[memory] embedder = "e5-small-q4"`, driven through a real MCP client (memories found by meaning, long memories
as several passages, the model id the store reports), and a store switched between the default model and e5 and
back (the collection refuses vectors of the other model until `persmem memory reindex`; after it every memory
is found again). Plus the embedder's own contract on the real engine: as many vectors as chunk_counts says."""

from __future__ import annotations

import re
import subprocess
import time

import numpy as np
import pytest

from persmem_core.testing import ToolCallError, clean_env, persmem_command, start_server, write_config
from persmem_embedder_e5.embedder import MODEL_ID, PASSAGE, WINDOW, E5Embedder

MINILM_ID = "all-MiniLM-L6-v2-onnx-int8-dynamic"  # the default embedder's id, as the server runs it
OTHER_PLUGINS = "dashboard,shell,git,searxng,sessions"  # not needed here: a faster start

FACTS = {
    "cat": "Our cat sleeps on the keyboard every afternoon.",
    "db": "The staging database was moved from Postgres to SQLite in March.",
    "tabs": "Alice prefers tabs over spaces when she writes Python.",
    "disk": "The deploy pipeline fails whenever the build machine runs out of disk space.",
    "coffee": "Bruno drinks three espressos before the morning stand-up meeting.",
}
PARAPHRASES = [  # no word in common with the memory they must find (checked below)
    ("feline naps atop my computer input device daily", "cat"),
    ("which SQL server backs our pre-prod environment now?", "db"),
    ("indentation style preferred by that developer", "tabs"),
    ("rollouts break if a CI host has no free storage left", "disk"),
    ("Wo schläft unsere Katze nachmittags?", "cat"),  # German: e5 is multilingual
]
LONG = "\n\n".join([
    "Paragraph one is about the garden. The tomatoes were planted in April along the south fence, the basil went "
    "into pots near the kitchen door, and the old apple tree was pruned hard because it had not fruited for two "
    "years. Slugs ate most of the lettuce seedlings, so copper tape now runs around the raised beds. A rain barrel "
    "was fitted to the shed gutter, and the compost heap was turned twice before the summer heat arrived.",
    "Paragraph two covers the car. The hatchback failed its inspection because of a worn brake disc and a cracked "
    "rear light. The garage replaced both, rotated the tyres and noticed the timing belt is due at the next "
    "service, which will cost far more than this visit did. The insurance renewal also came in higher this year, so"
    " the plan is to compare three quotes before the end of the month.",
    "Paragraph three is the band. Rehearsals moved to Thursday evenings in the basement of the community hall. The "
    "drummer bought a new snare, the bassist is learning the slower arrangement of the second song, and the gig at "
    "the harbour pub is booked for the first Saturday of next month. Posters go up at the record shop next week, "
    "and the singer is writing a short acoustic set for the encore.",
    "Paragraph four is the trip planning. The train to the mountains leaves at seven, the hut must be booked two "
    "weeks ahead, and everyone needs boots that are already broken in. The weather in the valley changes fast in "
    "the afternoon, so the plan is to reach the ridge before noon. Maps, a first aid kit and spare batteries for "
    "the head torches are on the packing list, with lunch bought at the station.",
    "Paragraph five is the kitchen renovation. The cabinets arrive in six weeks, the electrician has to move two "
    "sockets first, and the worktop will be oak rather than stone because stone would have doubled the cost. The "
    "old fridge goes to the neighbours. During the work the family will cook on a camping stove in the dining room "
    "and wash the dishes in the bathroom sink.",
    "Paragraph six is the bakery order. The birthday cake is chocolate with raspberry filling, ordered for "
    "collection on Friday afternoon; the bakery also needs the number of guests by Wednesday so it can add enough "
    "small pastries, and it asked whether anyone has a nut allergy.",
    "Paragraph seven is the office move. The team moves to the third floor in two weeks, the printers go first, "
    "and every desk must be cleared into labelled crates by Thursday night. Parking passes change too, so "
    "everyone should hand in the old card at reception.",
    "Paragraph eight is about the astronomy club. Members met at the observatory to photograph Saturn's rings through"
    " the big refractor telescope; the best exposures came after midnight when the planet stood highest, and the "
    "club treasurer ordered a new eyepiece and a dew heater for the winter sessions.",
])
LAST_PARAGRAPH_QUERY = "stargazing society imaging ringed worlds"


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def server_env(home):
    return clean_env(home, PERSMEM_DISABLE_PLUGINS=OTHER_PLUGINS)


@pytest.fixture(scope="module")
def e5_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("e5-home")
    write_config(home, {"memory": {"embedder": "e5-small-q4"}})
    server = start_server(home, agents=("kite",), env=server_env(home))
    yield server
    server.stop()


def top_ids(server, query: str, project: str, mode: str = "dense") -> list[str]:
    reply = server.call_tool("memory_search", {"query": query, "project": project, "mode": mode, "top_k": 5},
                             agent="kite")
    return [hit["id"] for hit in reply["results"]]


def test_memories_are_found_by_meaning_with_no_word_in_common(e5_server):
    first, *rest = FACTS
    ids = {first: e5_server.call_tool("memory_store", {"content": FACTS[first], "project": "meaning"},
                                      agent="kite")["id"]}
    stored = e5_server.call_tool("memory_bulk_store", {"chunks": [{"content": FACTS[k]} for k in rest],
                                                       "project": "meaning", "context_chars": 0}, agent="kite")
    assert stored["stored"] == len(rest)
    ids |= {key: result["id"] for key, result in zip(rest, stored["results"], strict=True)}
    for query, key in PARAPHRASES:
        assert not words(query) & words(FACTS[key]), (query, words(query) & words(FACTS[key]))
        assert top_ids(e5_server, query, "meaning")[0] == ids[key], query
    assert top_ids(e5_server, PARAPHRASES[0][0], "meaning", mode="hybrid")[0] == ids["cat"]


def test_a_long_memory_is_several_passages_and_its_last_part_is_found(e5_server):
    assert 2700 <= len(LONG) <= 3300
    others = e5_server.call_tool("memory_bulk_store", {"chunks": [{"content": fact} for fact in FACTS.values()],
                                                       "project": "long", "context_chars": 0}, agent="kite")
    assert others["stored"] == len(FACTS)  # something else to rank below it (stored first: see the xfail below)
    stored = e5_server.call_tool("memory_store", {"content": LONG, "project": "long"}, agent="kite")
    assert stored["status"] == "stored" and stored["chunks"] >= 4, stored
    assert not words(LAST_PARAGRAPH_QUERY) & words(LONG)
    assert top_ids(e5_server, LAST_PARAGRAPH_QUERY, "long")[0] == stored["id"]
    found = e5_server.call_tool("memory_get", {"memory_id": stored["id"]}, agent="kite")
    assert found["content"] == LONG  # kept whole: the passages are only how it is indexed


@pytest.mark.xfail(strict=True, reason="[memory] supersede_min_similarity (0.7) is in the default model's scale; "
                   "e5's cosines of unrelated texts reach it, so memory_store links an unrelated memory as restating "
                   "an older one (the thresholds need values for e5)")
def test_an_unrelated_later_memory_does_not_supersede_an_older_one(e5_server):
    older = e5_server.call_tool("memory_store", {"content": LONG, "project": "unrelated"}, agent="kite")
    e5_server.call_tool("memory_store", {"content": FACTS["cat"], "project": "unrelated"}, agent="kite")
    deadline = time.monotonic() + 60  # the link is looked for when the new memory is embedded (in the background)
    while e5_server.call_tool("memory_stats", {}, agent="kite")["not_embedded_yet"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    got = e5_server.call_tool("memory_get", {"memory_id": older["id"]}, agent="kite")
    assert not got.get("superseded_by"), got.get("superseded_by")


def test_the_store_reports_the_e5_model_and_the_plugin_is_listed(e5_server):
    e5_server.call_tool("memory_store", {"content": "Model id check.", "project": "stats"}, agent="kite")
    assert e5_server.call_tool("memory_stats", {}, agent="kite")["embedding_model"] == MODEL_ID
    listed = subprocess.run(persmem_command("plugins"), env=e5_server.env, capture_output=True, text=True,
                            timeout=60)
    assert re.search(r"^embedder_e5 \S+ \[loaded\] persmem-plugin-embedder-e5 .*\n +hooks: register_embedders$",
                     listed.stdout, re.M), listed.stdout


def test_switching_models_needs_a_reindex_and_keeps_every_memory_findable(tmp_path):
    home = tmp_path / "home"
    server = start_server(home, agents=("kite",), env=server_env(home))  # the default model

    def reindex() -> str:
        done = subprocess.run(persmem_command("memory", "reindex"), env=server.env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def all_found(model_id: str) -> None:
        assert server.call_tool("memory_stats", {}, agent="kite")["embedding_model"] == model_id
        for key, memory_id in ids.items():  # each memory by its own text, by meaning only
            assert top_ids(server, memories[key], "switch")[0] == memory_id, (model_id, key)
        assert top_ids(server, LAST_PARAGRAPH_QUERY, "switch")[0] == ids["long"], model_id

    memories = FACTS | {"long": LONG}
    try:
        stored = server.call_tool("memory_bulk_store", {"chunks": [{"content": text} for text in memories.values()],
                                                        "project": "switch", "context_chars": 0}, agent="kite")
        ids = {key: result["id"] for key, result in zip(memories, stored["results"], strict=True)}
        all_found(MINILM_ID)
        server.stop()

        write_config(home, {"memory": {"embedder": "e5-small-q4"}})
        server.start()
        with pytest.raises(ToolCallError, match=re.escape("persmem memory reindex")):  # the store refuses to mix
            server.call_tool("memory_search", {"query": "cat", "project": "switch"}, agent="kite")
        server.stop()
        assert f"memories: re-embedded {len(ids)} memories with {MODEL_ID}" in reindex()
        server.start()
        all_found(MODEL_ID)
        server.stop()

        write_config(home, {"memory": {"embedder": "minilm-int8"}})  # and back
        assert f"memories: re-embedded {len(ids)} memories with {MINILM_ID}" in reindex()
        server.start()
        all_found(MINILM_ID)
    finally:
        server.stop()


def test_chunk_counts_match_the_vectors_on_the_real_engine():
    embedder = E5Embedder().load()
    no_spaces = "x" * 3000  # one "word" longer than a passage: cut into pieces
    texts = ["short", "", LONG, no_spaces, LONG + " " + no_spaces, "a\x00b", "lone \ud800 surrogate"]
    counts = embedder.chunk_counts(texts)
    vectors = embedder.embed_chunks(texts, batch_size=4)
    assert counts == [len(v) for v in vectors] and counts[:2] == [1, 1] and counts[2] >= 4 and counts[3] >= 2
    for v in vectors:
        assert v.dtype == np.float32 and v.shape[1] == embedder.dim == 384
        assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-3)
    passages = embedder._passages(LONG)
    assert all(embedder._tokens(p) <= PASSAGE for p in passages) and embedder._tokens(LONG) > WINDOW
    assert passages[0].startswith("Paragraph one") and passages[-1].endswith("winter sessions.")
    assert all(p in LONG for p in passages)  # slices of the text, overlapping
    assert passages[1].split()[0] in passages[0]
    query = embedder.embed_query("how are Saturn's rings photographed?")
    assert query.shape == (384,) and int(np.argmax(vectors[2] @ query)) == len(vectors[2]) - 1
