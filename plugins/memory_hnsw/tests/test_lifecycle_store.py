"""The lifecycle's store layer on a real Collection with the real embedder: supersedes links (explicit and
detected) and their derived side, feedback, retrieval counts, staleness, consolidated memories, and a kill -9
during a stream of link writes. Nothing here ever deletes a memory."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persmem_core.sdk import UserError
from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
from persmem_memory_hnsw.search.weighing import LifecycleView, adjust, tier
from persmem_memory_hnsw.store.query import Filters
from persmem_memory_hnsw.store.records import MAX_FEEDBACK

HERE = Path(__file__).parent

OTHER_FACTS = [
    "The cat sleeps on the red sofa in the afternoon.",
    "Our continuous integration runs on GitHub Actions with Ubuntu runners.",
    "Lunch is at noon on Fridays in the small meeting room.",
    "The release notes are written in Markdown and published on the wiki.",
    "Backups of the laptop go to an external disk every Sunday.",
]


@pytest.fixture(scope="module")
def embedder():
    return OnnxEmbedder(default_model_files()).load()


def open_collection(folder, embedder, name="memories", **cfg):
    return Collection(name, folder, embedder, MemoryConfig(**cfg)).open()


def store(col, content, *, author="kite", project="p", type="fact", editors=None, **fields):
    [result] = col.store([NewMemory(content=content, project=project, type=type, tags=[], **fields)],
                         author=author, editors=editors)
    assert result["status"] == "stored", result
    return result


def expected_links(col):
    """The derived side recomputed from the live heads alone (what a fresh replay must give)."""
    out = {"successor_of": {}, "consolidated_into": {}}
    for field, derived in (("supersedes", "successor_of"), ("consolidates", "consolidated_into")):
        best = {}
        for head in col.memories.values():
            for target in getattr(head, field):
                key = (head.created, head.id)
                if target not in best or key > best[target][0]:
                    best[target] = (key, head.id)
        out[derived] = {target: linker for target, (_, linker) in best.items()}
    return out


def assert_links_consistent(col):
    expected = expected_links(col)
    assert col.rows.successor_of == expected["successor_of"]
    assert col.rows.consolidated_into == expected["consolidated_into"]


def rank_of(hits, memory_id):
    ids = [hit.memory.id for hit in hits]
    return ids.index(memory_id) if memory_id in ids else None


def test_links_survive_reopen_and_compaction(tmp_path, embedder):
    folder = tmp_path / "memories"
    col = open_collection(folder, embedder)
    for fact in OTHER_FACTS:
        store(col, fact)
    old = store(col, "The staging server uses PostgreSQL 15 as its database.")["id"]
    new = store(col, "Staging now runs on SQLite instead of PostgreSQL.", supersedes=[old])
    assert new["supersedes"] == [{"id": old, "how": "explicit"}]
    members = [h.id for h in col.memories.values() if h.id not in (old, new["id"])][:3]
    assert col.write_consolidated(NewMemory(content="Team habits: lunch at noon; CI on GitHub Actions.", project="p",
                                            type="consolidated", tags=["habits"], memory_id="con_x",
                                            consolidates=members, editor="persmem-consolidation"),
                                  author="kite")["status"] == "stored"
    col.validate(new["id"], by="wren", helpful=True, note="right")
    for step in ("reopen", "compact"):
        if step == "compact":
            col.compact()
        col.close()
        col = open_collection(folder, embedder)
        assert col.rows.successor_of == {old: new["id"]}, step
        assert col.rows.consolidated_into == dict.fromkeys(members, "con_x"), step
        assert col.memories[new["id"]].confidence == pytest.approx(2 / 3)
        assert col.lifecycle_of(old)["chain"] == [old, new["id"]]
        assert col.get(new["id"]).version == 1, "a link or a verdict makes no new version"
        assert_links_consistent(col)
    col.close()


def test_derived_side_follows_deletes_unlinks_and_fewer_links(tmp_path, embedder):
    col = open_collection(tmp_path / "memories", embedder)
    a = store(col, "The office wifi password is on the fridge.")["id"]
    e = store(col, "The printer on floor two needs toner.")["id"]
    b = store(col, "The office wifi password is now in the vault.", supersedes=[a])["id"]
    c = store(col, "The wifi password moved to the team password manager.", supersedes=[a, e])["id"]
    assert col.rows.successor_of == {a: c, e: c}, "several successors: the latest created wins"
    col.delete(c, by="kite", editors={})
    assert col.rows.successor_of == {a: b}, "the deleted successor's links go; the earlier one takes over"
    d = store(col, "Wifi and printer notes are kept in the handbook now.", supersedes=[a, e])["id"]
    col.unlink(d, supersedes_id=e, by="kite", editors={})
    assert col.rows.successor_of == {a: d} and col.memories[d].supersedes == (a,), "re-put with fewer links"
    col.unlink(a, supersedes_id=None, by="kite", editors={})  # the older side: drops d's link to it
    assert col.rows.successor_of == {a: b}
    col.unlink(b, supersedes_id=None, by="kite", editors={})
    assert col.rows.successor_of == {}
    history = col.get(d).link_history
    assert [(c.action, c.target, c.how) for c in history] == [("linked", a, "explicit"), ("linked", e, "explicit"),
                                                               ("unlinked", e, "unlink"), ("unlinked", a, "unlink")]
    with pytest.raises(UserError, match="supersedes nothing and nothing supersedes it"):
        col.unlink(b, supersedes_id=None, by="kite", editors={})
    with pytest.raises(UserError, match="does not supersede"):
        col.unlink(d, supersedes_id=e, by="kite", editors={})
    members = [a, e, b]
    col.write_consolidated(NewMemory(content="Where office secrets live.", project="p", type="consolidated", tags=[],
                                     memory_id="con_a", consolidates=members), author="kite")
    again = col.write_consolidated(NewMemory(content="Where office secrets live.", project="p", type="consolidated",
                                             tags=[], memory_id="con_a", consolidates=members), author="kite")
    assert again["status"] == "unchanged", "re-running with nothing new writes nothing"
    fewer = col.write_consolidated(NewMemory(content="Where the wifi password lives.", project="p",
                                             type="consolidated", tags=[], memory_id="con_a", consolidates=[a, b]),
                                   author="kite")
    assert fewer["status"] == "updated"
    assert col.rows.consolidated_into == {a: "con_a", b: "con_a"}
    consolidated = col.get("con_a")
    assert consolidated.version == 2 and consolidated.history[0].content == "Where office secrets live."
    assert_links_consistent(col)
    assert {a, b, d, e} <= set(col.memories), "unlinking and consolidating delete nothing"
    col.close()


def test_superseded_ranks_below_its_successor_and_can_be_hidden(tmp_path, embedder):
    col = open_collection(tmp_path / "memories", embedder)
    for fact in OTHER_FACTS:
        store(col, fact)
    query = "Which database does the staging server use?"
    old = store(col, "The staging server uses PostgreSQL as its database.")["id"]
    new = store(col, "We moved staging to SQLite last week.", supersedes=[old])["id"]
    hits = col.search(query, top_k=5, filters=Filters())
    assert rank_of(hits, new) < rank_of(hits, old)
    hidden = col.search(query, top_k=1, filters=Filters(), include_superseded=False)
    assert [h.memory.id for h in hidden] == [new], "hidden before the top_k cut: top_k=1 still gives a result"
    assert old not in {h.memory.id for h in col.search(query, top_k=10, filters=Filters(), include_superseded=False)}
    assert col.get(old).content.startswith("The staging server"), "still readable"
    assert col.lifecycle_of(old)["superseded_by"] == new
    # A successor the search's filters exclude inherits nothing (and is not shown).
    moved = store(col, "The staging server is decommissioned; see the new cluster.", project="q",
                  supersedes=[new])["id"]
    narrowed = col.search(query, top_k=5, filters=Filters(project="p"))
    assert moved not in {h.memory.id for h in narrowed} and rank_of(narrowed, new) is not None
    assert rank_of(col.search(query, top_k=5, filters=Filters()), moved) == 0, "the chain's latest wins"
    # A consolidated memory ranks above the members it gathers.
    lunch = [h.memory.id for h in col.search("lunch on Fridays", top_k=1, filters=Filters())]
    col.write_consolidated(NewMemory(content="Team routines.", project="p", type="consolidated", tags=[],
                                     memory_id="con_" + lunch[0], consolidates=lunch), author="kite")
    ranked = col.search("lunch on Fridays", top_k=3, filters=Filters())
    assert rank_of(ranked, "con_" + lunch[0]) < rank_of(ranked, lunch[0])
    col.close()


def test_feedback_is_one_vote_per_agent_and_bounded(tmp_path, embedder):
    col = open_collection(tmp_path / "memories", embedder)
    target = store(col, "Deployments happen on Tuesdays after the standup.", author="wren")["id"]
    early = [("owl", True), ("lark", False)]
    for agent, helpful in early:
        col.validate(target, by=agent, helpful=helpful)
    row = col.rows.row_of[target]
    view = LifecycleView(config=col.config, now=time.time())

    def factor():
        return adjust({col.rows.row_of[target]: 1.0}, col.rows, view)[col.rows.row_of[target]]

    assert factor() == pytest.approx(1.0), "one up, one down: no effect"
    for _ in range(150):  # one agent, again and again
        col.validate(target, by="kite", helpful=False, note="stale")
    memory = col.get(target)
    assert len(memory.feedback) <= MAX_FEEDBACK
    assert {f.by for f in memory.feedback} == {"owl", "lark", "kite"}, "a repeated vote pushes no one's out"
    assert col.memories[target].confidence == pytest.approx(2 / 5)  # (1 + up) / (2 + up + down), one vote each
    assert col.lifecycle_of(target)["feedback"] == {"helpful": 1, "unhelpful": 2}
    w = col.config.feedback_weight
    assert factor() == pytest.approx(1 + w * (2 * (2 / 5) - 1))
    assert row != col.rows.row_of[target], "each verdict is a logged Put"
    col.validate(target, by="kite", helpful=True)  # the latest verdict replaces the earlier ones
    assert col.memories[target].confidence == pytest.approx(3 / 5)
    for i in range(40):
        col.validate(target, by=f"agent{i}", helpful=False)
    assert 1 - w <= factor() <= 1 + w
    alone = store(col, "Only kite ever judged this one.", author="wren")["id"]
    for _ in range(50):
        col.validate(alone, by="kite", helpful=False)
    row = col.rows.row_of[alone]
    one_agent = adjust({row: 1.0}, col.rows, view)[row]
    assert one_agent == pytest.approx(1 - w / 3), "fifty votes by one agent count as one"
    with pytest.raises(UserError, match="at most 500"):
        col.validate(alone, by="kite", helpful=True, note="x" * 501)
    with pytest.raises(UserError, match="no memory"):
        col.validate("mem_nope", by="kite", helpful=True)
    col.close()


def test_expired_is_hidden_unless_asked_and_due_lists_review(tmp_path, embedder):
    col = open_collection(tmp_path / "memories", embedder)
    now = time.time()
    gone = store(col, "The conference discount code SPRING24 works until March.", valid_until=now - 60)["id"]
    review = store(col, "The conference budget is approved for two people.", review_after=now - 60)["id"]
    later = store(col, "The conference hotel is booked near the venue.", valid_until=now + 86400)["id"]
    query = "conference discount code budget hotel"
    shown = {h.memory.id for h in col.search(query, top_k=10, filters=Filters())}
    assert gone not in shown and {review, later} <= shown
    assert gone in {h.memory.id for h in col.search(query, top_k=10, filters=Filters(), include_expired=True)}
    due, expired = col.due(time.time())
    assert [h.id for h in due] == [review] and [h.id for h in expired] == [gone]
    assert col.lifecycle_of(gone)["expired"] and col.lifecycle_of(review)["review_due"]
    col.update(gone, editor="kite", editors={}, valid_until=0.0)  # cleared: searchable again
    assert gone in {h.memory.id for h in col.search(query, top_k=10, filters=Filters())}
    col.update(review, editor="kite", editors={}, review_after=now + 86400, tags=["budget"])
    assert col.due(time.time()) == ([], [])
    assert col.memories[review].review_after == now + 86400 and col.get(review).tags == ["budget"]
    col.close()


def test_who_may_link_and_unlink(tmp_path, embedder):
    col = open_collection(tmp_path / "memories", embedder)
    kites = store(col, "The build uses Python 3.11.", author="kite")["id"]
    with pytest.raises(UserError, match="may supersede only memories you wrote"):
        store(col, "The build uses Python 3.12 now.", author="wren", supersedes=[kites])
    with pytest.raises(UserError, match="no memory 'mem_missing'"):
        store(col, "The build uses Python 3.12 now.", author="kite", supersedes=["mem_missing"])
    with pytest.raises(UserError, match="cannot supersede itself"):
        store(col, "The build uses Python 3.12 now.", author="kite", memory_id="m1", supersedes=["m1"])
    identity = store(col, "I am kite, the build agent.", author="kite", type="identity")["id"]
    with pytest.raises(UserError, match="only 'kite' can supersede"):
        store(col, "I am the build agent.", author="wren", supersedes=[identity], editors={"wren": ["kite"]})
    assert len(col.memories) == 2, "a refused store stores nothing"
    wrens = store(col, "The build uses Python 3.12 now.", author="wren", supersedes=[kites],
                  editors={"wren": ["kite"]})["id"]
    with pytest.raises(UserError, match="only the authors of the linked memories"):
        col.unlink(wrens, supersedes_id=None, by="owl", editors={})
    col.unlink(kites, supersedes_id=None, by="kite", editors={})  # the older side's author
    assert col.rows.successor_of == {}
    relinked = store(col, "Python 3.12 is what the build runs.", author="wren", supersedes=[kites],
                     editors={"wren": ["kite"]})["id"]
    col.unlink(relinked, supersedes_id=kites, by="wren", editors={})  # the newer side's author
    granted = store(col, "The build runs Python 3.12 on every runner.", author="wren", supersedes=[kites],
                    editors={"wren": ["kite"]})["id"]
    col.unlink(granted, supersedes_id=None, by="owl", editors={"owl": ["wren"]})  # a grant over one side
    assert {kites, identity, wrens, relinked, granted} <= set(col.memories), "nothing is ever deleted"
    col.close()


def test_private_collections_hide_others_and_count_as_episodic(tmp_path, embedder):
    col = open_collection(tmp_path / "sessions", embedder, name="sessions")
    theirs = store(col, "wren said the deploy key rotates monthly.", author="wren", type="turn")["id"]
    with pytest.raises(UserError, match=f"no memory {theirs!r}"):
        store(col, "the deploy key rotates weekly.", author="kite", type="turn", supersedes=[theirs])
    with pytest.raises(UserError, match=f"no memory {theirs!r}"):
        col.validate(theirs, by="kite", helpful=False)
    mine = store(col, "kite said the deploy key rotates weekly now, not monthly.", author="kite", type="turn",
                 detect_supersession=True)
    assert "supersedes" not in mine, "no detection among session turns"
    assert col.lifecycle_of(theirs)["tier"] == "episodic" and tier("identity", False) == "procedural"
    col.close()


def test_detection_links_a_restatement_and_only_one(tmp_path, embedder):
    col = open_collection(tmp_path / "memories", embedder, supersede_min_similarity=0.6,
                          supersede_min_shared_terms=2)
    cat_fact = [store(col, fact)["id"] for fact in OTHER_FACTS][0]
    old = store(col, "The staging database is PostgreSQL 15 on host db01.")["id"]
    other_author = store(col, "The staging database is backed up to S3 nightly.", author="wren")["id"]
    new = store(col, "We moved the staging database from PostgreSQL to SQLite.", detect_supersession=True)
    [link] = new["supersedes"]
    assert link["id"] == old and link["how"] == "detected" and link["similarity"] >= 0.6
    assert {"staging", "database", "postgresql"} <= set(link["shared_terms"])
    assert col.get(new["id"]).link_history[0].detail.startswith("similarity ")
    assert other_author not in col.rows.successor_of, "wren's memory is not kite's to supersede"
    # Already superseded memories are not taken again; a memory without shared subject words is not either.
    again = store(col, "Staging database: SQLite file on the shared volume, migrated from PostgreSQL.",
                  detect_supersession=True)
    assert [s["id"] for s in again.get("supersedes", [])] in ([], [new["id"]])
    unrelated = store(col, "The coffee machine on floor three is descaled monthly.", detect_supersession=True)
    assert "supersedes" not in unrelated
    # A close statement that says nothing changed is not linked (a still-true sibling reads the same way); one
    # that says so is (lifecycle/restatement.says_change).
    restated = store(col, "Cats now sleep on sofas most afternoons.", detect_supersession=True)  # OTHER_FACTS[0]
    assert [s["id"] for s in restated["supersedes"]] == [cat_fact]
    same = store(col, "The Friday lunch in the small meeting room is paid from the team budget.",
                 detect_supersession=True)
    assert "supersedes" not in same
    plain = store(col, "The staging database is PostgreSQL 16 on host db02.")
    assert "supersedes" not in plain, "detection only when asked (memory_store of one curated memory)"
    assert_links_consistent(col)
    col.close()


def test_detection_needs_both_similarity_and_shared_terms(tmp_path, embedder):
    strict = open_collection(tmp_path / "a", embedder, supersede_min_similarity=0.6, supersede_min_shared_terms=6)
    store(strict, "The staging database is PostgreSQL 15 on host db01.")
    assert "supersedes" not in store(strict, "We moved the staging database from PostgreSQL to SQLite.",
                                     detect_supersession=True)
    strict.close()
    off = open_collection(tmp_path / "b", embedder, supersede_detect=False, supersede_min_similarity=0.0)
    store(off, "The staging database is PostgreSQL 15 on host db01.")
    assert "supersedes" not in store(off, "We moved the staging database from PostgreSQL to SQLite.",
                                     detect_supersession=True)
    off.close()


def test_retrieval_counts_are_saved_with_the_index_and_raise_rank_boundedly(tmp_path, embedder):
    folder = tmp_path / "memories"
    col = open_collection(folder, embedder)
    used = store(col, "The VPN config lives in the ops repository.")["id"]
    idle = store(col, "The VPN config lives in the ops repository too, as a copy.")["id"]
    for _ in range(500):
        col.record_retrievals([used])
    view = LifecycleView(config=col.config, now=time.time(), usage=col.retrievals.counts)
    rows = {col.rows.row_of[used]: 1.0, col.rows.row_of[idle]: 1.0}
    adjusted = adjust(rows, col.rows, view)
    assert adjusted[col.rows.row_of[used]] == pytest.approx(1 + col.config.retrieval_weight)
    assert adjusted[col.rows.row_of[idle]] == pytest.approx(1.0)
    col.close()
    assert (folder / "usage.msgpack").exists()
    col = open_collection(folder, embedder)
    count, last = col.usage_of(used)
    assert count == 500 and last > 0 and col.lifecycle_of(used)["retrievals"] == 500
    col.close()


def test_procedural_memories_do_not_age(tmp_path, embedder):
    col = open_collection(tmp_path / "memories", embedder)
    long_ago = time.time() - 400 * 86400
    rule = store(col, "Always answer in English.", type="preference", created=long_ago)["id"]
    note = store(col, "Answered in English last year.", type="note", created=long_ago)["id"]
    view = LifecycleView(config=col.config, now=time.time(), recency_weight=1.0)
    rows = {col.rows.row_of[rule]: 1.0, col.rows.row_of[note]: 1.0}
    adjusted = adjust(rows, col.rows, view)
    assert adjusted[col.rows.row_of[rule]] == pytest.approx(1.0)
    assert adjusted[col.rows.row_of[note]] < 0.01
    col.close()


def test_kill_9_during_link_writes_leaves_consistent_links(tmp_path, embedder):
    """A writer making, undoing and judging links is SIGKILLed at random moments; the store then opens with
    every acknowledged write in place (an unacknowledged one landed whole or not at all), every link's target
    live or reported gone, and the derived side equal to what the live heads say."""
    folder = tmp_path / "memories"
    rng = random.Random(17)
    truth: dict[str, tuple[str, ...]] = {}  # live id -> its links, as the store held them after the last kill
    kills, deadline = 0, time.monotonic() + 45
    while kills < 8 and time.monotonic() < deadline:
        proc = subprocess.Popen([sys.executable, str(HERE / "linker_for_kill.py"), str(folder), str(kills * 10_000)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        os.set_blocking(proc.stdout.fileno(), False)
        time.sleep(rng.uniform(0.1, 0.7))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        os.set_blocking(proc.stdout.fileno(), True)
        lines = proc.stdout.read().split("\n")[:-1]  # a line cut by the kill acknowledges nothing
        kills += 1
        acked = dict(truth)  # id -> links acknowledged
        pending: dict[str, tuple[str, ...]] = {}  # id -> links of a write begun, not acknowledged
        deleting: str | None = None
        deleted: set[str] = set()
        for line in lines:
            kind, memory_id, *links = line.split()
            if kind in ("s", "u"):
                pending[memory_id] = tuple(links)
            elif kind == "L":
                acked[memory_id] = tuple(links)
                pending.pop(memory_id, None)
            elif kind == "d":
                deleting = memory_id
            elif kind == "D":
                deleted.add(memory_id)
                acked.pop(memory_id, None)
                deleting = None
        col = open_collection(folder, embedder)
        try:
            live = col.memories
            for memory_id, links in acked.items():
                if memory_id == deleting and memory_id not in live:
                    continue  # its delete was under way: it may have landed
                assert memory_id in live, f"acknowledged {memory_id} lost after kill {kills}"
                assert live[memory_id].supersedes in (links, pending.get(memory_id, links)), memory_id
            for memory_id, links in pending.items():
                if memory_id not in acked and memory_id in live:  # a store that landed: whole
                    assert live[memory_id].supersedes == links
            assert not deleted & set(live), "a deleted memory came back"
            for head in live.values():
                gone = col.lifecycle_of(head.id)["links_gone"]
                assert all(target in live or target in gone for target in head.supersedes)
            assert_links_consistent(col)
            truth = {memory_id: head.supersedes for memory_id, head in live.items()}
        finally:
            col.close()
    assert kills >= 4 and sum(1 for links in truth.values() if links) >= 5
