"""Who is calling: API tokens, accounts, and the principal a request acts as."""

from cirrus.auth.principal import OPEN_PRINCIPAL, Permission, Principal

__all__ = ["OPEN_PRINCIPAL", "Permission", "Principal"]
