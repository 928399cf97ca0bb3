"""[memory] section of persmem.toml."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from persmem_core.sdk import ConfigSection


class MemoryConfig(ConfigSection):
    embedder: Annotated[
        str, Meta(description="Embedder name, offered by a plugin's register_embedders hook; an unknown name is refused "
                              "at start with the list of names on offer. Default: MiniLM int8 ONNX.")
    ] = "minilm-int8"
    model_dir: Annotated[
        str, Meta(description="An ONNX export folder (model.onnx + tokenizer.json) to use instead of `embedder`.")
    ] = ""
    dedup_threshold: Annotated[
        float, Meta(ge=0.0, le=1.0, description="Cosine similarity at or above which a new memory is a near duplicate.")
    ] = 0.97
    dense_weight: Annotated[
        float, Meta(ge=0.0, le=1.0, description="Weight of the dense score in hybrid fusion (the rest is BM25).")
    ] = 0.4
    question_weight: Annotated[
        float, Meta(ge=0.0, le=1.0, description="A memory whose text is a question ranks times this (the chunk "
                                                "after it in a memory_bulk_store conversation carries its words "
                                                "and is the likelier answer). 1 turns it off.")
    ] = 0.8
    date_weight: Annotated[
        float, Meta(ge=0.0, le=1.0, description="Added to the score (0-1 before the lifecycle's factors) of a "
                                                "memory created around a time the query names: 'on 1 May, 2023', "
                                                "'in March 2023', 'yesterday', 'last week'. 0 turns it off.")
    ] = 0.3
    search_candidates: Annotated[
        int, Meta(ge=10, le=2000, description="Candidates each side of a hybrid search (meaning, keywords) "
                                              "brings to the fusion; more find more, a little slower.")
    ] = 200
    hnsw_m: Annotated[int, Meta(ge=4, le=64, description="hnswlib M (graph degree).")] = 16
    hnsw_ef_construction: Annotated[
        int, Meta(ge=16, le=800, description="hnswlib ef_construction: how hard building the graph looks for "
                                             "neighbours (higher: better recall, slower stores).")
    ] = 100
    hnsw_ef_search: Annotated[
        int, Meta(ge=16, le=2000, description="hnswlib ef at query time: how many graph nodes a search visits "
                                              "(higher: better recall, slower searches).")
    ] = 96
    exact_search_below: Annotated[
        int, Meta(ge=0, description="Filtered searches matching at most this many chunks are exact (brute force).")
    ] = 16384
    max_content_chars: Annotated[int, Meta(ge=100, description="Longest memory accepted, in characters.")] = 200_000
    search_reply_chars: Annotated[
        int, Meta(ge=2000, le=1_000_000,
                  description="Longest memory_search reply, in characters: fewer and shorter results are sent "
                              "rather than a longer reply (the reply says when results were left out).")
    ] = 10_000
    search_passage_chars: Annotated[
        int, Meta(ge=200, description="Longest part of one memory a search result shows: a longer memory is shown "
                                      "by its best matching passage, marked truncated (memory_get gives the whole).")
    ] = 1500
    search_min_relative_score: Annotated[
        float, Meta(ge=0.0, le=1.0,
                    description="Search results far weaker than the best one are left out: those below this "
                                "fraction of the best result's score and of its keyword (BM25) score, and below "
                                "(1 + this) / 2 of its similarity in meaning. 0 keeps all top_k.")
    ] = 0.2
    editors: Annotated[
        dict[str, list[str]],
        Meta(description='Agents that may update and delete memories written by others: {operator = ["*"], '
                         'kite = ["wren"]} (editor -> authors, "*" = everyone). Every agent changes its own memories; '
                         "identity and directive entries only their author changes."),
    ] = {}
    private_collections: Annotated[
        list[str],
        Meta(description="Collections whose entries only their author sees and changes: memory_search, memory_get, "
                         "memory_list_collections, memory_stats and the dashboard show each agent only its own, "
                         "and no [memory] editors grant reaches into them. Default: the session transcripts "
                         "the sessions plugin indexes."),
    ] = msgspec.field(default_factory=lambda: ["sessions"])
    max_collections: Annotated[
        int, Meta(ge=1, le=10_000,
                  description="Most collections this server holds. A write (memory_store, memory_bulk_store) into a "
                              "new collection name creates it while fewer exist, and is refused past this, naming "
                              "it; reads never create one. Every collection is opened (about 2 MB of memory) at "
                              "every start. `memories` (always there) and the private collections are "
                              "made whatever this says.")
    ] = 32
    recall_min_similarity: Annotated[
        float, Meta(ge=0.0, le=1.0,
                    description="Similarity in meaning (cosine, 0-1) a memory needs to be added to a prompt by the "
                                "sessions plugin's prompt hook, or to a session's briefing from outside its project. "
                                "Measured with the default model: prompts about a stored fact score 0.55-0.88, "
                                "unrelated prompts at most 0.43.")
    ] = 0.45
    # -- the lifecycle: memory that stays true (search/weighing.py, lifecycle/consolidation.py; docs/memory.md) --
    supersede_detect: Annotated[
        bool, Meta(description="memory_store links a new memory to an older one of the same project it restates "
                               "(same author, or one it may edit) as superseding it: the older one then ranks "
                               "below and says so. Nothing is deleted; memory_unlink undoes a wrong link.")
    ] = True
    supersede_min_similarity: Annotated[
        float, Meta(ge=0.0, le=1.0, description="Similarity in meaning (cosine) a new memory needs with an older "
                                                "one to be taken as restating it (with supersede_min_shared_terms).")
    ] = 0.7
    supersede_min_shared_terms: Annotated[
        int, Meta(ge=0, le=20, description="Subject words (not stop words) the new and the older memory must share "
                                           "to be taken as a restatement.")
    ] = 2
    restated_min_similarity: Annotated[
        float, Meta(ge=0.0, le=1.0,
                    description="A new memory may restate the older memory of its project closest to it in meaning "
                                "when their cosine is at least this and it stands out from the project's other "
                                "memories (restated_min_lead): memory_store's reply names it (may_replace), a search "
                                "ranks it just below the new one (marked restated_by), a briefing shows the new one "
                                "instead. No link is stored. 1 turns the search and briefing side off.")
    ] = 0.35
    restated_min_lead: Annotated[
        float, Meta(ge=0.0, le=1.0,
                    description="How much closer in meaning (cosine) that older memory must be than the mean of "
                                "the project's next 8 closest, for a new memory to be taken as restating it.")
    ] = 0.2
    restated_min_lead_changed: Annotated[
        float, Meta(ge=0.0, le=1.0,
                    description="The same, when the new memory says something changed (\"now\", \"moved\", "
                                "\"instead\", \"no longer\", \"switched\"...).")
    ] = 0.05
    restated_min_score_ratio: Annotated[
        float, Meta(ge=0.0, le=1.0,
                    description="How well the later memory must answer the query, as a fraction of the older one's "
                                "search score, for the older one to rank below it; a still true older memory asked "
                                "about by its own words keeps its place.")
    ] = 0.2
    superseded_weight: Annotated[
        float, Meta(ge=0.0, le=1.0, description="Search score factor of a superseded memory (it ranks below the "
                                                "memory that replaced it; memory_search include_superseded=false "
                                                "hides it).")
    ] = 0.5
    consolidated_member_weight: Annotated[
        float, Meta(ge=0.0, le=1.0, description="Search score factor of a memory that a consolidated memory "
                                                "gathers (it ranks below that consolidated memory).")
    ] = 0.85
    feedback_weight: Annotated[
        float, Meta(ge=0.0, le=0.5, description="How far feedback moves a memory's score: confidence 1 multiplies it "
                                                "by 1 + this, confidence 0 by 1 - this (0.5, no feedback: unchanged).")
    ] = 0.15
    retrieval_weight: Annotated[
        float, Meta(ge=0.0, le=0.5, description="How far being retrieved often raises a memory's score: at most "
                                                "by this fraction (log-scaled, reached at 100 retrievals).")
    ] = 0.05
    tier_weights: Annotated[
        dict[str, float],
        Meta(description="Search score factor per tier: episodic (captured session turns), semantic (curated and "
                         "consolidated memories), procedural (identity, directive, preference, procedure).")
    ] = msgspec.field(default_factory=lambda: {"episodic": 0.9, "semantic": 1.0, "procedural": 1.0})
    consolidate_every_hours: Annotated[
        float, Meta(ge=0.0, description="How often the server consolidates when idle (0: never on its own; "
                                        "`persmem memory consolidate` and memory_consolidate still do).")
    ] = 24.0
    consolidate_idle_minutes: Annotated[
        float, Meta(ge=0.0, description="Minutes without a memory write before the scheduled consolidation runs.")
    ] = 10.0
    consolidate_min_age_days: Annotated[
        float, Meta(ge=0.0, description="Only memories at least this old are consolidated (a mature cluster).")
    ] = 7.0
    consolidate_min_similarity: Annotated[
        float, Meta(ge=0.0, le=1.0, description="Similarity in meaning (cosine) a memory needs with a cluster's "
                                                "first memory to join the cluster.")
    ] = 0.8
    consolidate_min_cluster: Annotated[
        int, Meta(ge=2, le=100, description="Fewest memories a cluster needs to be consolidated.")
    ] = 3
    consolidate_max_chars: Annotated[
        int, Meta(ge=500, le=20_000, description="Longest consolidated memory, in characters (its representative "
                                                  "statements, best first, until this is reached).")
    ] = 5000
    save_index_every: Annotated[int, Meta(ge=1, description="Save the vector index after this many changes.")] = 5000
    snapshot_every: Annotated[
        int, Meta(ge=1, description="On a cluster ([cluster] servers): when the index is saved, publish the "
                  "collection's files for new nodes to start from once this many log entries (and at least as many as "
                  "the collection has memories) came from the stream since the last snapshot.")
    ] = 10_000
    embed_batch: Annotated[
        int, Meta(ge=1, le=1024, description="Stores are acknowledged once logged and embedded in the background, "
                                             "up to this many at a time.")
    ] = 64
    search_waits_ms: Annotated[
        int, Meta(ge=0, le=60_000, description="A search waits at most this long for the memories stored before "
                                               "it to be embedded (then it ranks them by keyword only).")
    ] = 2000
    max_concurrent_per_agent: Annotated[
        int, Meta(ge=1, description="Memory tool calls one agent may have running at once (the server runs up to "
                                    "8 per plugin); more are refused until one ends, so one agent's bulk stores "
                                    "never hold up the others'.")
    ] = 4
