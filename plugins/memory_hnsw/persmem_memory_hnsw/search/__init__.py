"""Ranking at query time: fusion of the two indexes, what the query says, the lifecycle's weights, and replies.

- `ranking.py`      dense (graph or exact) + BM25, score fusion, then what the query and rows say; `Hit`
- `weighing.py`     how links, feedback, use, tiers, staleness and recency weigh in a search; the query-time
                    "later statement wins" rule
- `query_dates.py`  the times a search query names ("in May 2023", "yesterday"), for date-aware ranking
- `replies.py`      search replies sized for an AI: passages, budget, marks
"""
