"""What a new memory is to the older ones: a restatement (a supersedes link) or a duplicate.

- `supersession.py`  does a new memory restate an older one? (memory_store's detected links)
- `dedup.py`         exact and near duplicates among one author's memories (words first, then meaning)
"""
