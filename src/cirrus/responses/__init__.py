"""Responses that the Responses API stored (`store: true`), so that a conversation can continue by id."""

from cirrus.responses.store import StoredResponse, StoredResponses

__all__ = ["StoredResponse", "StoredResponses"]
