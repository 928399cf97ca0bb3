"""Finding memories: the vector graph, BM25, fusion and what the query says, and replies sized for an AI.

- `vectors.py`      the hnswlib index: labels, slot reuse, checksummed save/load
- `lexical.py`      BM25 over numpy postings, with stemming
- `ranking.py`      dense (graph or exact) + BM25, score fusion, then what the query and rows say
- `query.py`        filters, tags, labels and dates read from what a caller typed (tools and panels)
- `query_dates.py`  the times a search query names ("in May 2023", "yesterday"), for date-aware ranking
- `contexts.py`     neighbouring chunks' text and the question a chunk replies to, for memory_bulk_store
- `replies.py`      search replies sized for an AI: passages, budget, marks
"""
