"""The network the server reaches on a caller's behalf, and the addresses it binds.

- `guard.py`      SSRF rules for every outgoing fetch: private addresses refused, redirects checked
- `resolver.py`   name resolution that a hung DNS server cannot pile up
- `addresses.py`  small facts about the addresses the server binds to (loopback, free ports)
"""
