"""The operator's credential in oauth.json (store.py): the passphrase typed on the consent page, kept as scrypt, and
one-time approval codes (`persmem oauth approve-code`), kept as SHA-256 and used up by the consent they approve.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

from persmem_core.auth.agents import secret_sha256
from persmem_core.auth.oauth.records import ApprovalCode
from persmem_core.errors import UserError
from persmem_core.invocation import persmem_line

MIN_PASSWORD_CHARS = 12
MAX_SECRET_CHARS = 1024  # longer operator secrets are refused before scrypt sees them
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
APPROVAL_CODE_CHARS = 12  # base32: 60 bits, single use, for minutes; typed by a person, so grouped by 4


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=64 * 1024 * 1024, dklen=32)


def check_time_spent(secret: str) -> None:
    """The work of one passphrase check, done for nothing: a consent refused for another reason (an agent
    that does not exist) takes as long as a wrong passphrase, so its timing does not tell them apart."""
    _scrypt(secret[:MAX_SECRET_CHARS], b"\0" * 16, SCRYPT_N, SCRYPT_R, SCRYPT_P)


def _normal_approval_code(secret: str) -> str | None:
    """The approval code as generated (upper case, no separators), or None if `secret` cannot be one."""
    code = "".join(secret.split()).replace("-", "").upper()
    if len(code) != APPROVAL_CODE_CHARS or any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567" for c in code):
        return None
    return code



class OperatorCredential:
    """The operator's part of the store, mixed into OAuthStore over its RegistryFile (whose `_locked`, `_save` and
    `_snapshot` it reads and writes the file with)."""

    def set_operator_password(self, password: str) -> None:
        """Set the passphrase the operator types on the consent page (stored as scrypt)."""
        if not isinstance(password, str) or len(password) < MIN_PASSWORD_CHARS:
            raise UserError(f"the operator passphrase must be at least {MIN_PASSWORD_CHARS} characters; choose a "
                            f"longer one, or let `{persmem_line('oauth', 'password', '--generate')}` make one.")
        if len(password) > MAX_SECRET_CHARS:
            raise UserError(f"the operator passphrase is longer than {MAX_SECRET_CHARS} characters; choose a "
                            "shorter one.")
        salt = secrets.token_bytes(16)
        digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
        encoded = f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"
        with self._locked() as data:
            data.operator.password_scrypt = encoded
            self._save(data)

    def new_approval_code(self, minutes: int = 10) -> str:
        """A one-time code ("XXXX-XXXX-XXXX") that approves one consent within `minutes`."""
        if not isinstance(minutes, int) or not 1 <= minutes <= 1440:
            raise UserError("an approval code works for 1 to 1440 minutes; give --minutes in that range.")
        code = base64.b32encode(secrets.token_bytes(8)).decode("ascii")[:APPROVAL_CODE_CHARS]
        with self._locked() as data:
            data.operator.approval_codes = [*data.operator.approval_codes,
                                            ApprovalCode(code_sha256=secret_sha256(code), expires=time.time() + minutes * 60)]
            self._save(data)
        return "-".join(code[i:i + 4] for i in range(0, APPROVAL_CODE_CHARS, 4))

    def has_operator_credential(self) -> bool:
        """A passphrase is set, or an approval code is waiting to be used."""
        operator = self._snapshot().operator
        now = time.time()
        return operator.password_scrypt is not None or any(a.expires > now for a in operator.approval_codes)

    def check_operator(self, secret: str) -> bool:
        """True if `secret` is the operator passphrase or a live approval code (which is then used up)."""
        if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET_CHARS:
            return False
        code = _normal_approval_code(secret)
        if code is not None and self._use_approval_code(code):
            return True
        encoded = self._snapshot().operator.password_scrypt
        if not encoded:
            return False
        try:
            _, n, r, p, salt, expected = encoded.split("$")
            digest = _scrypt(secret, bytes.fromhex(salt), int(n), int(r), int(p))
        except ValueError:
            raise UserError(f"{self.path}: the operator passphrase record is damaged; set it again with "
                            f"`{persmem_line('oauth', 'password')}`.") from None
        return hmac.compare_digest(digest.hex(), expected)

    def _use_approval_code(self, code: str) -> bool:
        hashed = secret_sha256(code)
        now = time.time()
        if not any(hmac.compare_digest(a.code_sha256, hashed) for a in self._snapshot().operator.approval_codes):
            return False  # no write for what is surely not a code
        with self._locked() as data:
            codes = data.operator.approval_codes
            match = next((a for a in codes if hmac.compare_digest(a.code_sha256, hashed) and a.expires > now), None)
            if match is None:
                return False
            data.operator.approval_codes = [a for a in codes if a is not match]
            self._save(data)
        return True
