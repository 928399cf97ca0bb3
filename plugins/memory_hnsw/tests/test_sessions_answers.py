"""The memory plugin's answers to the sessions plugin, asked as that plugin asks them: `host.hook.<name>(...)` on
a started Host in a real home (the model, the store and the log are the real ones). Grouped by question:
indexing turns, searching them back, recalling memories for a prompt, the briefing a session starts with."""

from __future__ import annotations

import logging
import threading

import pytest

from persmem_memory_hnsw.collection import NewMemory
from persmem_memory_hnsw.service import service
from persmem_memory_hnsw.sessions_answers import SESSIONS, turn_id
from sessionsfixtures import started_host, turn

# A store of facts from one made-up company; prompts about them must recall them, prompts about anything else
# must recall nothing (the score floor, [memory] recall_min_similarity).
FACTS = [
    "The billing service retries Stripe webhooks three times with exponential backoff before paging on-call.",
    "Decision: we use PostgreSQL 16 with logical replication for the analytics replica, not Debezium.",
    "Bug: the nightly export job fails when a customer name contains a tab character; escape it in export.py.",
    "Preference: Alice wants commit messages in the imperative mood and under 72 characters.",
    "The staging cluster runs on three Hetzner CX41 nodes managed with k3s.",
    "The mobile app's login screen uses biometric unlock via the iOS LocalAuthentication framework.",
    "Our TLS certificates renew through certbot on the edge proxy every 60 days.",
    "Pattern: wrap every outbound HTTP call in a circuit breaker with a 2 second timeout.",
    "The design system's primary color is #1F6FEB and buttons have 6px rounded corners.",
    "Grafana dashboards for the API live in the ops repo under dashboards/api.json.",
    "The invoice PDF generator uses WeasyPrint and needs the DejaVu fonts installed.",
    "Rate limit for the public API is 600 requests per minute per token.",
    "The data team's Airflow DAGs run at 02:00 UTC and write to the warehouse schema raw.",
    "Redis is used only as a cache; never store session state there, it is evicted under memory pressure.",
    "Backups of the main database go to S3 bucket acme-backups with 30-day retention.",
    "The CI pipeline caches pip wheels keyed on the hash of requirements.lock.",
]
PROMPTS_ABOUT_FACTS = {
    "how many times do we retry stripe webhooks?": 0,
    "our payment provider's webhook retry policy": 0,
    "is it ok to keep user sessions in redis?": 13,
    "which fonts must be installed on the server for generating invoices": 10,
    "where are database backups stored and for how long": 14,
    "what's the API rate limit per token": 11,
}
UNRELATED_PROMPTS = [
    "write a haiku about autumn leaves",
    "what is the capital of Peru",
    "explain the difference between a list and a tuple in python",
    "refactor this function to use a generator instead of building a list",
    "fix the failing unit test in test_parser.py",
    "add a dark mode toggle to the settings page",
    "why does my rust borrow checker complain about a mutable reference",
    "what's a good recipe for banana bread",
    "run the linter and fix the warnings",
    "please commit the changes",
]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    host = started_host(tmp_path_factory.mktemp("home"))
    memories = service(host).collection("memories", create=True)
    memories.store([NewMemory(content=fact, project="acme", type="note", tags=[]) for fact in FACTS],
                   author="wren", dedup=False)
    yield host
    host.shutdown()


def ask_recall(host, prompt, *, agent="kite", project="acme", exclude_ids=(), top_k=3):
    return host.hook.recall_for_prompt(host=host, agent=agent, project=project, prompt=prompt,
                                       exclude_ids=list(exclude_ids), top_k=top_k)


# -- indexing: each turn once, in the private collection, as the design names its fields --------------------

def test_indexing_the_same_turns_twice_stores_them_once(host):
    turns = [turn(i, f"turn number {i} about the deploy script", session_id="twice") for i in range(4)]
    assert host.hook.index_session_turns(host=host, agent="kite", turns=turns) == [4]
    assert host.hook.index_session_turns(host=host, agent="kite", turns=turns) == [0]
    more = [turn(i, f"turn number {i} about the deploy script", session_id="twice") for i in range(2, 7)]
    assert host.hook.index_session_turns(host=host, agent="kite", turns=more) == [3]
    col = service(host).collection(SESSIONS)
    assert sum(1 for m in col.memories.values() if "session:twice" in m.tags) == 7


def test_a_turn_is_stored_with_its_session_role_time_and_folder(host):
    host.hook.index_session_turns(host=host, agent="kite", turns=[
        turn(0, "Where does the invoice code live?", session_id="fields-1"),
        turn(1, "In billing/invoices.py, next to the PDF renderer.", session_id="fields-1", role="assistant",
             time="2026-03-01T10:00:05.250Z", cwd="/home/me/src/acme/billing", client="codex")])
    memory = service(host).collection(SESSIONS).get(turn_id("kite", "codex", "fields-1", 1))
    assert (memory.author, memory.type, memory.project) == ("kite", "assistant", "acme")
    assert memory.tags == ["session:fields-1", "client:codex"]
    assert memory.created == pytest.approx(1772359205.25)
    assert memory.context.startswith("/home/me/src/acme/billing\n")


def test_turns_without_text_or_malformed_are_skipped_and_the_rest_indexed(host):
    turns = [turn(0, "   ", session_id="mixed"), {"text": "no session"}, turn(2, "a real turn", session_id="mixed"),
             {**turn(3, "bad index", session_id="mixed"), "index": "x"}]
    assert host.hook.index_session_turns(host=host, agent="kite", turns=turns) == [1]


# -- indexing never stalls: a turn that cannot be stored as it came is cut, cleaned or left out alone ---------

def test_a_turn_in_a_very_long_folder_is_indexed_with_the_folder_cut(host):
    long_cwd = "/" + "a" * 4000
    turns = [turn(0, "a turn about cormorants in a deep folder", session_id="long-cwd", cwd=long_cwd),
             turn(1, "x" * 3000, session_id="long-cwd", cwd=long_cwd, role="assistant")]
    assert host.hook.index_session_turns(host=host, agent="kite", turns=turns) == [2]
    memory = service(host).collection(SESSIONS).get(turn_id("kite", "claude", "long-cwd", 0))
    assert memory.context.startswith("/" + "a" * 999 + "\n") and len(memory.context) <= 4001


def test_a_turn_cut_inside_an_emoji_is_indexed_with_a_replacement_character(host):
    turns = [turn(0, "the deploy output ends in a cut emoji \ud83d", session_id="cut-emoji"),
             turn(1, "and a whole one \ud83d\ude00", session_id="cut-emoji", cwd="/home/me/\udc80src")]
    assert host.hook.index_session_turns(host=host, agent="kite", turns=turns) == [2]
    col = service(host).collection(SESSIONS)
    assert col.get(turn_id("kite", "claude", "cut-emoji", 0)).content.endswith("cut emoji \ufffd")
    assert col.get(turn_id("kite", "claude", "cut-emoji", 1)).content.endswith("whole one \U0001F600")


def test_a_turn_the_store_refuses_is_logged_without_its_text_and_the_rest_indexed(host, caplog):
    secret_text = "the refused turn's own words: ptarmigan"
    turns = [turn(0, "the turn before the refused one", session_id="refused"),
             turn(10 ** 120, secret_text, session_id="refused"),  # its id would be over 128 characters
             turn(2, "the turn after the refused one", session_id="refused")]
    with caplog.at_level(logging.WARNING, logger="persmem.memory.sessions"):
        assert host.hook.index_session_turns(host=host, agent="kite", turns=turns) == [2]
    refused = [r.getMessage() for r in caplog.records if "not indexed" in r.getMessage()]
    assert len(refused) == 1 and "invalid memory id" in refused[0] and "ptarmigan" not in caplog.text


def test_a_turn_id_another_author_holds_is_left_out_and_logged(host, caplog):
    squatted = turn_id("kite", "claude", "squatted", 0)
    service(host).collection(SESSIONS, create=True).store([NewMemory(content="planted by wren", project="acme", type="note",
                                                        tags=[], memory_id=squatted)], author="wren", dedup=False)
    turns = [turn(0, "kite's first turn", session_id="squatted"), turn(1, "kite's second turn", session_id="squatted")]
    with caplog.at_level(logging.WARNING, logger="persmem.memory.sessions"):
        assert host.hook.index_session_turns(host=host, agent="kite", turns=turns) == [1]
    assert f"{squatted} of kite not indexed: its id is taken by a memory of wren" in caplog.text
    assert service(host).collection(SESSIONS).get(squatted).content == "planted by wren"


def test_indexing_from_several_threads_at_once_stores_each_turn_once(host):
    turns = [turn(i, f"concurrent turn {i}: the cache warms up after deploy", session_id="threads")
             for i in range(150)]
    counts = []

    def index():
        counts.append(host.hook.index_session_turns(host=host, agent="kite", turns=turns)[0])

    def store_memories():  # a tool writing the same store meanwhile
        service(host).collection(SESSIONS, create=True).store(
            [NewMemory(content=f"kite's own note {i}", project="acme", type="note", tags=[]) for i in range(20)],
            author="kite", dedup=False)

    workers = [threading.Thread(target=index) for _ in range(3)] + [threading.Thread(target=store_memories)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sum(counts) == 150
    col = service(host).collection(SESSIONS)
    assert sum(1 for m in col.memories.values() if "session:threads" in m.tags) == 150


# -- searching turns back: only the agent's own ------------------------------------------------------------

def test_search_returns_only_the_agents_own_turns_as_turn_dicts(host):
    # heron has no other turns in this module's store: every turn found is one of these (kite's from the tests
    # above come up by meaning once embedded, and would make the answer depend on the embedder's timing)
    host.hook.index_session_turns(host=host, agent="heron", turns=[
        turn(0, "the flamingo migration needs a maintenance window", session_id="kite-s"),
        turn(1, "schedule the flamingo migration for Sunday night", session_id="kite-s", role="assistant")])
    host.hook.index_session_turns(host=host, agent="wren", turns=[
        turn(0, "wren's secret: the flamingo migration password is in the vault", session_id="wren-s")])
    found = host.hook.search_session_turns(host=host, agent="heron", query="flamingo migration", project="",
                                           session_id="", top_k=5)
    assert found and {t["session_id"] for t in found} == {"kite-s"}
    best = found[0]
    assert set(best) == {"session_id", "client", "index", "role", "text", "time", "cwd", "project", "score"}
    assert best["cwd"] == "/home/me/src/acme" and best["client"] == "claude" and best["index"] in (0, 1)
    wren = host.hook.search_session_turns(host=host, agent="wren", query="flamingo migration", project="",
                                          session_id="", top_k=5)
    assert {t["session_id"] for t in wren} == {"wren-s"}


def test_search_narrows_to_a_session_and_a_project(host):
    host.hook.index_session_turns(host=host, agent="kite", turns=[
        turn(0, "the pelican report is due Friday", session_id="p-1", project="birds"),
        turn(0, "the pelican report needs charts", session_id="p-2", project="birds"),
        turn(0, "pelican is also the name of the static site generator", session_id="p-3", project="web")])
    ask = dict(host=host, agent="kite", query="pelican report", top_k=5)
    assert {t["session_id"] for t in host.hook.search_session_turns(project="", session_id="p-2", **ask)} == {"p-2"}
    assert {t["project"] for t in host.hook.search_session_turns(project="birds", session_id="", **ask)} == {"birds"}


# -- recall: a stored fact for a prompt about it, nothing for a prompt about anything else ------------------

@pytest.mark.parametrize("prompt", PROMPTS_ABOUT_FACTS)
def test_a_prompt_about_a_stored_fact_recalls_it(host, prompt):
    found = ask_recall(host, prompt)
    assert found and found[0]["text"] == FACTS[PROMPTS_ABOUT_FACTS[prompt]]
    assert set(found[0]) == {"id", "text", "score", "project", "author"}
    assert found[0]["project"] == "acme" and found[0]["author"] == "wren"


def test_a_prompt_about_an_unrelated_topic_recalls_nothing(host):
    recalled = {prompt: ask_recall(host, prompt) for prompt in UNRELATED_PROMPTS}
    assert recalled == {prompt: [] for prompt in UNRELATED_PROMPTS}


def test_a_prompt_of_a_word_or_two_recalls_nothing(host):
    assert ask_recall(host, "hello") == [] and ask_recall(host, "yes, go") == []


def test_recall_never_repeats_what_the_session_already_received(host):
    prompt = "how many times do we retry stripe webhooks?"
    first = ask_recall(host, prompt)
    again = ask_recall(host, prompt, exclude_ids=[m["id"] for m in first])
    assert first and not {m["id"] for m in first} & {m["id"] for m in again}


def test_recall_never_hands_over_session_turns_or_identity_entries(host):
    host.hook.index_session_turns(host=host, agent="kite", turns=[
        turn(0, "The billing service retries Stripe webhooks three times, I checked today.", session_id="r-1")])
    service(host).collection("memories").store([NewMemory(
        content="I am wren: I answer questions about Stripe webhook retries.", project="acme", type="identity",
        tags=[], memory_id="wren-identity-recall")], author="wren", dedup=False)
    found = ask_recall(host, "how many times do we retry stripe webhooks?", top_k=5)
    assert [(m["author"], m["text"]) for m in found] == [("wren", FACTS[0])]


def test_a_recalled_memory_names_its_author_whoever_wrote_it(host):
    service(host).collection("memories").store([NewMemory(
        content="kite's note: the kestrel cache flush runs nightly at 03:00 UTC.", project="acme", type="note",
        tags=[])], author="kite", dedup=False)
    [own] = ask_recall(host, "when does the kestrel cache flush run nightly?", top_k=1)
    assert own["author"] == "kite" and own["text"].startswith("kite's note: the kestrel") and "editor" not in own
    [others] = ask_recall(host, "how many times do we retry stripe webhooks?", top_k=1)
    assert others["author"] == "wren" and others["text"].startswith("The billing service")
