"""What a new memory is to the older ones: a restatement (a supersedes link) or a duplicate; and, later, what a
mature cluster of similar memories becomes: one consolidated memory.

- `supersession.py`         does a new memory restate an older one? (memory_store's detected links, when sure)
- `restatement.py`          which older memories a memory may restate: store replies, searches, briefings
- `dedup.py`                exact and near duplicates among one author's memories (words first, then meaning)
- `consolidation.py`        a consolidation run over one collection (`consolidate`) and its report
- `candidates.py`           who a consolidation may gather: the snapshot of candidates and consolidated memories
                            by (project, author), their memory vectors, the consolidated ids
- `clustering.py`           finding the clusters: growth, then new clusters, exact or from a graph of the group
- `consolidated_memory.py`  writing a consolidated memory: its extractive text, tags, the one log append
- `consolidation_job.py`    the idle-time job that consolidates every shared collection on a schedule
"""
