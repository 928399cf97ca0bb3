"""Encryption at rest (docs/encryption.md).

- `keys.py`     the home's key: where it comes from, how it is checked and created, which keys the data needs
- `sealing.py`  sealing what plugins write: AES-256-GCM under the home's key, bound to a purpose
"""
