"""AI Search (Cloudflare's RAG product): instances of uploaded documents, chunked, embedded and indexed, searched
by meaning and by words, and answered from by a chat model."""

from cirrus.rag.index import ChunkIndex, fuse
from cirrus.rag.model import ChunkText, Claim, Hit, Instance, Item, ItemState, JobStatus
from cirrus.rag.opening import open_index
from cirrus.rag.store import RagStore

__all__ = [
    "ChunkIndex",
    "ChunkText",
    "Claim",
    "Hit",
    "Instance",
    "Item",
    "ItemState",
    "JobStatus",
    "RagStore",
    "fuse",
    "open_index",
]
