"""Several persmem nodes on one NATS JetStream cluster (docs/scale-out.md), and local clusters for tests.

- `nats_link.py`      the process's one connection to the cluster; streams bound to their place
- `local_cluster.py`  a cluster of real nats-server processes on this machine (tests, benchmarks, trials)
- `round_robin.py`    a haproxy round robin in front of several nodes (tests, trials)
"""
