"""Replies sized for an AI caller: what memory_search and chorus_init send back.

A reply is read by a model with a bounded context, so it carries what helps the caller decide and no more:
for each memory its best matching passage (the whole text when it is short; `memory_get` gives the whole of
any), the fields a caller filters or cites on, hits no weaker than a fraction of the best one, all within one
size budget (`[memory] search_reply_chars`). The query is never echoed whole and internals (content hashes,
distances, sub-ranker scores, timings) appear only when asked for (`verbose`).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .ranking import Hit
from ..config import MemoryConfig
from ..store.lexical import WORD_RE, Analyzer
from .weighing import expired, review_due
from ..store.records import Memory, confidence, iso, made_by

QUERY_ECHO_CHARS = 200  # a longer query is echoed cut, with its length
MIN_PASSAGE_CHARS = 200  # a hit shows at least this much of its memory, whatever the budget
MAX_TAGS_SHOWN = 30  # a memory's tags beyond these are counted, not listed (tags have no count limit)
TRUNCATED_NOTE = ("A result marked truncated shows only its best matching passage (shown_chars: where it starts "
                  "and ends in the memory); memory_get(memory_id) returns the whole memory.")
SUPERSEDED_NOTE = ("A result with superseded_by was replaced by a later memory (that id): it may no longer be true "
                   "and ranks lower; prefer its successor. memory_get shows the chain; if the link is wrong, "
                   "memory_unlink(memory_id) undoes it. include_superseded=false leaves such results out.")
RESTATED_NOTE = ("A result with restated_by ranks just below a later memory (that id) of the same project and author "
                 "that says much the same: it may no longer be current; prefer the later one if they disagree. "
                 "A guess from similarity: nothing is linked or hidden.")
EXPIRED_NOTE = "A result marked expired is past its valid_until date: kept for the record, no longer to be relied on."
REVIEW_NOTE = ("A result marked review_due is past its review_after date: check it still holds, then memory_update "
               "it (a new review_after) or memory_validate it.")

_analyzer: Analyzer | None = None
_analyzer_lock = threading.Lock()


def _terms(text: str) -> list[str]:
    """BM25's terms (case-folded, stop words dropped, stemmed), so a passage matches what the search matched."""
    global _analyzer
    with _analyzer_lock:
        if _analyzer is None:
            _analyzer = Analyzer()
        return _analyzer.terms(text)


def reply_chars(reply: dict) -> int:
    """How long `reply` is as the caller reads it (the MCP text block: indented JSON, non-ASCII as is)."""
    return len(json.dumps(reply, indent=2, ensure_ascii=False))


def echo(query: str) -> str:
    """The query as a reply repeats it: whole when short, else its start and its length."""
    if len(query) <= QUERY_ECHO_CHARS:
        return query
    return f"{query[:QUERY_ECHO_CHARS]}… ({len(query)} characters)"


# -- the best passage of a memory ---------------------------------------------------------------------------

def best_passage(content: str, query_terms: set[str], width: int) -> tuple[int, int]:
    """(start, end) of the `width`-character stretch of `content` holding the most distinct query terms (then
    the most occurrences), cut at word boundaries; the start of the memory when no term occurs in it."""
    if len(content) <= width:
        return 0, len(content)
    matches = _term_positions(content, query_terms) if query_terms else []
    if not matches:
        return 0, _cut_back(content, width)
    best, best_span = (0, 0), (matches[0][0], matches[0][1])
    in_window: Counter[str] = Counter()
    right = 0
    for left, (start, _, _) in enumerate(matches):
        while right < len(matches) and matches[right][1] - start <= width:
            in_window[matches[right][2]] += 1
            right += 1
        score = (len(in_window), right - left)
        if score > best:
            best, best_span = score, (start, matches[right - 1][1])
        in_window[matches[left][2]] -= 1
        if not in_window[matches[left][2]]:
            del in_window[matches[left][2]]
    first, last = best_span
    slack = width - (last - first)
    start = max(0, first - slack // 3)  # some lead-in before the first match, more room after it
    end = min(len(content), start + width)
    start = max(0, end - width)
    if start > 0:  # begin on a word, never before the first match
        space = content.find(" ", start, first)
        start = space + 1 if space != -1 else start
    if end < len(content):
        space = content.rfind(" ", max(last, start + 1), end)
        end = space if space != -1 else end
    return start, end


def _term_positions(content: str, query_terms: set[str]) -> list[tuple[int, int, str]]:
    """(start, end, term) of each word of `content` whose term is one of `query_terms`, in order."""
    # Snowball changes only the ends of words: a word whose first two letters start no query term cannot
    # stem to one, and is not stemmed at all (a 200,000-character memory has some 20,000 distinct words).
    heads = {term[:2] for term in query_terms}
    words = [(m.start(), m.end(), m.group()) for m in WORD_RE.finditer(content)
             if m.group()[:2].casefold() in heads]
    term_of = {}
    for word in {w for _, _, w in words}:
        terms = _terms(word)
        term_of[word] = terms[0] if len(terms) == 1 and terms[0] in query_terms else None
    return [(start, end, term_of[word]) for start, end, word in words if term_of[word] is not None]


def _cut_back(content: str, width: int) -> int:
    """The end of the first `width` characters, moved back to a word boundary when there is one."""
    space = content.rfind(" ", width // 2, width)
    return space if space != -1 else width


def shaped_content(content: str, query_terms: set[str], width: int) -> dict:
    """`content` as a reply shows it: whole when it fits in `width`, else its best passage marked truncated."""
    start, end = best_passage(content, query_terms, width)
    if start == 0 and end == len(content):
        return {"content": content}
    text = ("…" if start else "") + content[start:end] + ("…" if end < len(content) else "")
    return {"content": text, "truncated": True, "full_chars": len(content), "shown_chars": [start, end]}


# -- memory_search ------------------------------------------------------------------------------------------

def search_reply(query: str, collection: str, hits: list[Hit], config: MemoryConfig, *, searched_chars: int,
                 verbose: bool = False, took_ms: float | None = None, marks=None) -> dict:
    """memory_search's reply for `hits` (best first): the floor, passages and the size budget applied.
    `marks(memory)` gives fields added to a hit (a session turn's session and index), counted in the budget."""
    reply: dict = {"query": echo(query), "collection": collection, "count": 0, "results": []}
    notes = []
    if len(query) > searched_chars:
        notes.append(f"Only the first {searched_chars} characters of the query were searched.")
    kept = above_floor(hits, config.search_min_relative_score)
    if verbose:
        reply["took_ms"] = took_ms
        reply["below_score_floor"] = len(hits) - len(kept)
    budget = config.search_reply_chars
    base = reply_chars(reply) + 400  # room for the notes
    per_hit = (budget - base) // max(1, len(kept)) - 350  # a hit's fields besides its text take ~350 characters
    width = max(MIN_PASSAGE_CHARS, min(config.search_passage_chars, per_hit))
    terms = set(_terms(query[:searched_chars]))
    for n, hit in enumerate(kept):
        item = _search_hit(hit, terms, width, verbose, marks)
        reply["results"].append(item)
        over = reply_chars(reply) - (budget - 400)
        if over > 0 and n == 0 and item.get("truncated"):  # the best hit always comes back: shorter, not dropped
            reply["results"][0] = item = _search_hit(hit, terms, max(MIN_PASSAGE_CHARS, width - over), verbose, marks)
        elif over > 0:
            reply["results"].pop()
            left = len(kept) - n
            notes.append(f"{left} more matching memor{'y' if left == 1 else 'ies'} left out to keep this reply under "
                         f"{budget} characters; narrow the query or the filters, or lower top_k, to see "
                         f"{'it' if left == 1 else 'them'}.")
            break
    reply["count"] = len(reply["results"])
    if any(item.get("truncated") for item in reply["results"]):
        notes.append(TRUNCATED_NOTE)
    for mark, note in (("superseded_by", SUPERSEDED_NOTE), ("restated_by", RESTATED_NOTE), ("expired", EXPIRED_NOTE),
                       ("review_due", REVIEW_NOTE)):
        if any(mark in item for item in reply["results"]):  # each explained once, only when it appears
            notes.append(note)
    if notes:
        reply["note"] = " ".join(notes)
    return reply


def above_floor(hits: list[Hit], floor: float) -> list[Hit]:
    """The hits worth showing, judged against the best of each signal: a fused score, a BM25 score at least
    `floor` times the best one's, or a similarity in meaning at least (1 + floor) / 2 of the best similarity
    (cosines of unrelated texts are not near 0, so the bar is higher). The raw signals are needed because fusion
    scales each side's candidates min-max: the weakest candidate fuses to 0 however close it is, so in a search
    narrowed to two memories the second would fall under any floor on the fused score alone."""
    if not hits or floor <= 0:
        return hits
    top = max(h.score for h in hits)
    top_lexical = max((h.lexical for h in hits if h.lexical is not None), default=0.0)
    top_dense = max((h.dense for h in hits if h.dense is not None), default=0.0)
    dense_floor = (1.0 + floor) / 2 * top_dense
    return [h for h in hits
            if h.score >= floor * top
            or (top_lexical > 0 and h.lexical is not None and h.lexical >= floor * top_lexical)
            or (top_dense > 0 and h.dense is not None and h.dense >= dense_floor)]


def _search_hit(hit: Hit, terms: set[str], width: int, verbose: bool, marks=None) -> dict:
    memory = hit.memory
    item = {"id": memory.id, "score": round(hit.score, 3), **shaped_content(memory.content, terms, width)}
    item.update(_fields(memory))
    if marks is not None:
        item.update(marks(memory))
    if hit.restated_by:
        item["restated_by"] = hit.restated_by
    if verbose:
        item.update({"collection": memory.collection, "editor": made_by(memory.version, memory.editor, memory.author),
                     "content_hash": memory.content_hash,
                     "distance": None if hit.dense is None else round(1.0 - hit.dense, 4),
                     "lexical_score": None if hit.lexical is None else round(hit.lexical, 4)})
    return item


def _fields(memory: Memory) -> dict:
    """What a caller filters or cites on, besides id and content."""
    tags = memory.tags[:MAX_TAGS_SHOWN]
    fields = {"project": memory.project, "type": memory.type, "tags": tags}
    if len(memory.tags) > len(tags):
        fields["tags_not_shown"] = len(memory.tags) - len(tags)
    fields.update({"author": memory.author, "created": iso(memory.created), "updated": iso(memory.updated),
                   "version": memory.version})
    return fields


# -- the lifecycle's marks on a result (search/weighing.py; docs/memory.md "Memory that stays true") ----------------

@dataclass(frozen=True)
class LifecycleLinks:
    """What a reply needs to mark a memory beyond its own record: the derived side of its links (a collection's
    `Rows.successor_of` and `Rows.consolidated_into`, read as they are at reply time) and the time of the reply."""

    successor_of: Mapping[str, str]
    consolidated_into: Mapping[str, str]
    now: float


def lifecycle_marks(memory: Memory, links: LifecycleLinks) -> dict:
    """The marks a search result carries, each only when it applies (a plain current memory carries none):
    superseded_by / supersedes (ids), consolidated_into (id) / consolidates (member count), confidence (only
    once someone gave feedback), expired, review_due."""

    marks: dict = {}
    successor = links.successor_of.get(memory.id)
    if successor:
        marks["superseded_by"] = successor
    if memory.supersedes:
        marks["supersedes"] = list(memory.supersedes)
    gathered_into = links.consolidated_into.get(memory.id)
    if gathered_into:
        marks["consolidated_into"] = gathered_into
    if memory.consolidates:
        marks["consolidates"] = len(memory.consolidates)
    if memory.feedback:
        marks["confidence"] = round(confidence(memory.feedback, memory.author), 3)
    if expired(memory.valid_until, links.now):
        marks["expired"] = True
    if review_due(memory.review_after, links.now):
        marks["review_due"] = True
    return marks


# -- memory_consolidate --------------------------------------------------------------------------------------

CLUSTER_PREVIEW_CHARS = 200  # a cluster is shown by the start of what its consolidated memory says
CLUSTER_MEMBER_IDS = 10  # member ids listed per cluster (memory_get of the consolidated memory lists them all)


def consolidation_reply(report, collection: str, dry_run: bool, budget: int) -> dict:
    """memory_consolidate's reply for a lifecycle.consolidation.ConsolidationReport: counts, then each cluster (its
    consolidated memory's id, project, action, member count and first member ids, a preview) while the reply
    stays within `budget` characters."""
    clusters = report.clusters
    reply: dict = {"collection": collection, "dry_run": dry_run, "created": report.created, "grown": report.grown,
                   "unchanged": sum(cluster.action == "unchanged" for cluster in clusters),
                   "seconds": round(report.seconds, 3), "clusters": []}
    for n, cluster in enumerate(clusters):
        preview = cluster.preview if len(cluster.preview) <= CLUSTER_PREVIEW_CHARS else (
            cluster.preview[:CLUSTER_PREVIEW_CHARS].rsplit(" ", 1)[0] + "…")
        item = {"id": cluster.id, "project": cluster.project, "action": cluster.action,
                "members": len(cluster.members), "member_ids": cluster.members[:CLUSTER_MEMBER_IDS],
                "preview": preview}
        reply["clusters"].append(item)
        if reply_chars(reply) > budget - 400:
            reply["clusters"].pop()
            reply["clusters_not_shown"] = len(clusters) - n
            break
    notes = []
    if dry_run:
        notes.append("Dry run: nothing was written. Call memory_consolidate(dry_run=false) to write these clusters.")
    elif report.created or report.grown:
        notes.append("Members are kept and stay searchable, marked consolidated_into; memory_get(id) of a "
                     "consolidated memory lists all its members.")
    if not clusters:
        notes.append("No cluster found: consolidation takes only your own memories older than "
                     "[memory] consolidate_min_age_days, in groups of at least [memory] consolidate_min_cluster "
                     "similar ones of one project.")
    if "clusters_not_shown" in reply:
        notes.append(f"{reply['clusters_not_shown']} more clusters left out to keep this reply short; pass project "
                     "to see one project's.")
    if notes:
        reply["note"] = " ".join(notes)
    return reply


# -- lists of memories (chorus_init) ------------------------------------------------------------------------

def memory_list(memories: Iterable[Memory], width: int) -> list[dict]:
    """Memories as a list shows them: each whole up to `width` characters, else its start marked truncated."""
    return [{"id": m.id, **shaped_content(m.content, set(), width), **_fields(m)} for m in memories]
