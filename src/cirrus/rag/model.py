"""What AI Search keeps and hands out: instances, their items (uploaded files), the chunks an item is cut into,
search hits, an ingest job's progress, and the claim an ingest runner holds on one item."""

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class Instance:
    """Cloudflare's "AI Search instance". `uid` keys everything stored for it, so a name freed by a delete and
    taken again never meets the old instance's rows."""

    uid: str
    id: str  # the name the account chose, unique in the account
    account_id: str
    embedding_model: str
    chat_model: str
    chunk_size: int  # target tokens per chunk
    chunk_overlap: int  # percent of a chunk repeated in the next
    hybrid: bool
    max_num_results: int
    score_threshold: float
    created_at: float
    modified_at: float


class ItemState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    ERROR = "error"


@dataclass(frozen=True)
class Item:
    """One uploaded file. `chunks` counts what the index holds for it: the last version indexed, which a
    changed file's new version replaces only once it is indexed."""

    id: str
    instance_uid: str
    account_id: str
    key: str  # the file name as uploaded ('/' separates folders)
    content_hash: str  # sha256 hex of the bytes
    size: int
    state: ItemState
    chunks: int
    error: str | None
    job_id: str  # the upload it was last queued by
    created_at: float
    modified_at: float
    token_id: str | None = None  # the token of that upload: its embedding calls are made as that token


@dataclass(frozen=True)
class ChunkText:
    position: int  # 0.. within the file
    text: str  # as embedded and returned, heading path included
    heading: str  # "Guide > Install", '' when none


@dataclass(frozen=True)
class Hit:
    """`score`: cosine similarity for vectors, a BM25-derived score (higher is better) for keywords, the
    reciprocal-rank sum for fused rankings."""

    item_id: str
    key: str
    position: int
    text: str
    heading: str
    score: float


@dataclass(frozen=True)
class Claim:
    """A runner's hold on one item. `attempt` counts the item's claims over its whole life, so it tells this
    claim from any later one and a stale claim can never finish, renew or release a newer one. `tries` counts
    the claims since the item was last queued by an upload, this one included: a retry budget."""

    item: Item
    holder: str
    attempt: int
    tries: int = 1


@dataclass(frozen=True)
class JobStatus:
    """One upload's items by state, read in one query. An item uploaded again later belongs to the later job;
    an unchanged file in an upload is not queued, so not counted in it."""

    id: str
    instance_uid: str
    created_at: float
    ended_at: float | None  # when its last item settled; None while any is queued or running
    queued: int
    running: int
    completed: int
    errored: int

    @property
    def total(self) -> int:
        return self.queued + self.running + self.completed + self.errored

    @property
    def finished(self) -> bool:
        return self.queued == 0 and self.running == 0
