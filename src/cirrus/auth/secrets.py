"""API token secrets: how they look, how they are stored, and the public id that names them.

A secret carries 240 random bits, so one SHA-256 is enough to store it: no guess can be checked against the
hash faster than it could be tried against the server. A slow password hash would only slow every request.
"""

import hashlib
import secrets

TOKEN_PREFIX = "cirrus_"
_SECRET_BYTES = 30  # 40 url-safe characters
_TOKEN_ID_BYTES = 6  # 12 hex characters
_ACCOUNT_ID_BYTES = 16  # 32 hex characters, like a Cloudflare account id


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token_id() -> str:
    """The public name of a token in listings, logs and usage; it proves nothing."""
    return secrets.token_hex(_TOKEN_ID_BYTES)


def new_account_id() -> str:
    return secrets.token_hex(_ACCOUNT_ID_BYTES)
