"""Several persmem nodes on one NATS JetStream cluster (docs/scale-out.md), and local clusters for tests.

- `nats_link.py`      the process's one connection to the cluster; streams bound to their place
- `nats_access.py`    who the link connects as: private credentials, the TLS context, telling refusals apart
- `nats_doctor.py`    what `persmem doctor` says about the cluster: open or plain servers, unsealed frames, replicas
- `local_cluster.py`  a cluster of real nats-server processes on this machine (tests, benchmarks, trials)
- `local_node.py`     one nats-server process of a local cluster: its ports, config, log, monitoring endpoint
- `local_credentials.py`  a local cluster's users: nkey seeds, each node's permissions, secrets written 0600
- `local_tls.py`      a local cluster's private CA and server certificates (when it listens beyond loopback)
- `round_robin.py`    a haproxy round robin in front of several nodes (tests, trials)
"""
