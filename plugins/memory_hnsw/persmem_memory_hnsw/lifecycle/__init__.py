"""Memory that stays true: later statements, consolidation, duplicates, and how each weighs in a search.

- `weighing.py`      how links, feedback, use, tiers, staleness and recency weigh in a search; the query-time
                     "later statement wins" rule
- `supersession.py`  does a new memory restate an older one? (memory_store's detected links)
- `consolidate.py`   clusters of mature similar memories -> consolidated memories; the idle-time job
- `dedup.py`         exact and near duplicates among one author's memories (words first, then meaning)
"""
