"""Zero-config local development without giving an open node to a network: with no API tokens configured the
node serves everyone, which is allowed on a loopback address and elsewhere only when asked for explicitly."""

import ipaddress

from cirrus.config import Settings
from cirrus.db import open_database

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_loopback_host(host_header: str) -> bool:
    """Whether an HTTP `Host` header names a loopback address: `[::1]:8787`, `localhost:8787`, `127.0.0.1`. An
    open node answers only under such a name, so a page elsewhere that rebinds its own domain to 127.0.0.1 (and
    so sends that domain as Host) gets nothing from it."""
    if host_header.startswith("["):
        host = host_header.split("]", 1)[0] + "]"
    else:
        host = host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header
    return is_loopback(host)


def open_mode_refusal(host: str, has_tokens: bool, allow_open: bool) -> str | None:
    """Why the node must not start, or None."""
    if has_tokens or allow_open or is_loopback(host):
        return None
    return (
        f"refusing to serve {host} without API tokens: anyone who can reach it could use every model. "
        "Create a token (`cirrus accounts create NAME`, then `cirrus tokens create --account ID --name NAME`), "
        "or pass --allow-open to serve it open on purpose."
    )


async def tokens_configured(settings: Settings) -> bool:
    from cirrus.auth.store import IdentityStore

    db = await open_database(settings.database_url())
    try:
        identity = IdentityStore(db)
        await identity.migrate()
        return await identity.any_token_created()
    finally:
        await db.close()
