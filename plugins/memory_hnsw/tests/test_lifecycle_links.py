"""The derived side of the lifecycle links (Rows.successor_of, Rows.consolidated_into) on Rows alone: it equals
what the live heads give whatever the order of puts and removes, a link never reaches a later memory that only
reuses a deleted target's id, and many memories linking one id replay in linear time. And the votes rule: an
author's verdict on its own memory only answers the others'."""

from __future__ import annotations

import random
import time

from persmem_memory_hnsw.store.records import Feedback, Memory, confidence, votes
from persmem_memory_hnsw.store.rows import Rows


def memory(memory_id: str, created: float, *, supersedes=(), consolidates=(), author="kite") -> Memory:
    return Memory(id=memory_id, content=f"text of {memory_id}", project="p", type="fact", tags=[], author=author,
                  collection="memories", created=created, updated=created, content_hash=memory_id,
                  supersedes=list(supersedes), consolidates=list(consolidates))


def verdicts(*pairs: tuple[str, bool]) -> list[Feedback]:
    return [Feedback(by=by, at=float(i), helpful=helpful) for i, (by, helpful) in enumerate(pairs)]


def test_an_authors_verdict_on_its_own_memory_only_answers_the_others():
    assert confidence(verdicts(("wren", True)), "wren") == 0.5  # alone: no lift
    assert confidence(verdicts(("wren", False)), "wren") == 0.5  # nor a sink
    assert votes(verdicts(("kite", False), ("wren", True)), "wren") == (1, 1)  # evens one verdict against it
    assert votes(verdicts(("kite", False), ("owl", False), ("wren", True)), "wren") == (1, 2)  # never more
    assert votes(verdicts(("kite", True), ("wren", True)), "wren") == (1, 0)  # never past neutral
    assert votes(verdicts(("kite", True), ("wren", False)), "wren") == (1, 1)
    assert votes(verdicts(("kite", True), ("wren", True)), "") == (2, 0)  # no author given: every agent counts


def put(rows: Rows, m: Memory) -> None:
    rows.put(m, (0, 0))


def derived(rows: Rows) -> dict[str, dict[str, str]]:
    """The derived side recomputed from the live heads alone: a linker counts unless the live memory of the
    linked id was created after it; the one created latest wins (ties: the greatest id)."""
    out = {}
    for field, name in (("supersedes", "successor_of"), ("consolidates", "consolidated_into")):
        best = {}
        for head in rows.heads.values():
            for target in getattr(head, field):
                live = rows.heads.get(target)
                if target == head.id or (live is not None and live.created > head.created):
                    continue
                key = (head.created, head.id)
                if target not in best or key > best[target]:
                    best[target] = key
        out[name] = {target: linker for target, (_, linker) in best.items()}
    return out


def assert_consistent(rows: Rows) -> None:
    expected = derived(rows)
    assert rows.successor_of == expected["successor_of"]
    assert rows.consolidated_into == expected["consolidated_into"]


def replay(count: int) -> tuple[Rows, float]:
    """Put `count` memories that all supersede and consolidate one id, remove the older half, re-put a tenth:
    the rows and the seconds it took."""
    rows = Rows()
    put(rows, memory("old", 1.0))
    linkers = [memory(f"new{i}", 2.0 + i, supersedes=["old"], consolidates=["old"]) for i in range(count)]
    started = time.perf_counter()
    for m in linkers:
        put(rows, m)
    for m in linkers[: count // 2]:  # the oldest linkers go first: the latest stays, nothing to recompute
        rows.remove(m.id)
    for m in linkers[count // 2: count // 2 + count // 10]:  # a new version of a linker is a remove and a put
        put(rows, m)
    return rows, time.perf_counter() - started


def test_ten_thousand_memories_superseding_one_id_replay_in_linear_time():
    # Linear, not quadratic: ten times the linkers takes about ten times as long (a quadratic replay, a scan of
    # every linker per put, takes ~100 times). Compared as a ratio of the best of three runs in this process, so
    # a busy machine slows both sizes alike; the wall-clock target itself belongs to the benchmarks.
    small = min(replay(1_000)[1] for _ in range(3))
    rows, large = min((replay(10_000) for _ in range(3)), key=lambda run: run[1])
    assert rows.successor_of["old"] == rows.consolidated_into["old"] == "new9999"
    assert large < 35 * small, f"10,000 linkers took {large / small:.0f} times as long as 1,000 (linear is ~10)"
    rows.remove("new9999")  # the latest goes: the next latest takes over
    assert rows.successor_of["old"] == "new9998"
    assert_consistent(rows)


def test_a_link_to_a_deleted_id_never_reaches_a_later_memory_of_that_id():
    rows = Rows()
    put(rows, memory("kite-identity", 1.0, author="wren"))  # a squatter's placeholder
    put(rows, memory("wren-note", 2.0, supersedes=["kite-identity"], consolidates=["kite-identity"], author="wren"))
    assert rows.successor_of["kite-identity"] == "wren-note"
    rows.remove("kite-identity")
    assert rows.successor_of["kite-identity"] == "wren-note"  # a link to a deleted memory is still shown as made
    put(rows, memory("kite-identity", 3.0))  # kite's own entry, stored later under the same id
    assert "kite-identity" not in rows.successor_of and "kite-identity" not in rows.consolidated_into
    assert rows.chain("kite-identity") == [] and rows.is_current(rows.heads["kite-identity"], now=4.0)
    put(rows, memory("kite-identity", 3.0))  # a new version of it (same creation): still nobody's successor
    assert "kite-identity" not in rows.successor_of
    put(rows, memory("kite-later", 5.0, supersedes=["kite-identity"]))  # a link made after it counts
    assert rows.successor_of["kite-identity"] == "kite-later"
    rows.remove("kite-later")
    assert "kite-identity" not in rows.successor_of
    assert_consistent(rows)


def test_the_derived_links_equal_the_live_heads_whatever_the_order():
    rng = random.Random(17)
    rows, clock = Rows(), 0.0
    ids = [f"m{i}" for i in range(40)]  # few ids: deleted ones are reused, links name dead and live ids
    for _ in range(3000):
        clock += rng.choice([0.0, 1.0])  # ties in creation time too
        memory_id = rng.choice(ids)
        current = rows.heads.get(memory_id)
        if current is not None and rng.random() < 0.3:
            rows.remove(memory_id)
        else:
            created = current.created if current is not None else clock  # a new version keeps its creation
            linked = rng.sample(ids, rng.choice([0, 1, 1, 2, 3]))
            put(rows, memory(memory_id, created, supersedes=linked, consolidates=linked[:1]))
        assert_consistent(rows)
