"""AI Search's objects as Cloudflare's API writes them (the `cloudflare` SDK's `aisearch` types read them)."""

from datetime import UTC, datetime
from typing import Any

from cirrus.rag.model import Instance, Item, ItemState, JobStatus
from cirrus.rag.retrieval import Scored

NAMESPACE = "default"  # one namespace per account: Cloudflare's default one
SOURCE = "builtin"  # items are uploaded files, not an R2 bucket or a crawled site


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def instance_object(instance: Instance) -> dict[str, Any]:
    return {
        "id": instance.id,
        "namespace": NAMESPACE,
        "created_at": iso(instance.created_at),
        "modified_at": iso(instance.modified_at),
        "embedding_model": instance.embedding_model,
        "ai_search_model": instance.chat_model,
        "chunk": True,
        "chunk_size": instance.chunk_size,
        "chunk_overlap": instance.chunk_overlap,
        "hybrid_search_enabled": instance.hybrid,
        "fusion_method": "rrf",
        "max_num_results": instance.max_num_results,
        "score_threshold": instance.score_threshold,
        "reranking": False,
        "rewrite_query": False,
        "cache": False,
        "paused": False,
        "enable": True,
        "type": None,
        "source": None,
    }


def item_object(item: Item) -> dict[str, Any]:
    return {
        "id": item.id,
        "key": item.key,
        "checksum": item.content_hash,
        "chunks_count": item.chunks,
        "file_size": item.size,
        "created_at": iso(item.created_at),
        "last_seen_at": iso(item.modified_at),
        "namespace": NAMESPACE,
        "source_id": SOURCE,
        "next_action": "INDEX" if item.state in (ItemState.QUEUED, ItemState.RUNNING) else None,
        "status": item.state.value,
        "error": item.error,
        "job_id": item.job_id,
    }


def job_object(job: JobStatus) -> dict[str, Any]:
    return {
        "id": job.id,
        "source": "user",
        "started_at": iso(job.created_at),
        "ended_at": iso(job.ended_at) if job.ended_at is not None else None,
        "status": "completed" if job.finished else "running",
        "total": job.total,
        "queued": job.queued,
        "running": job.running,
        "completed": job.completed,
        "errored": job.errored,
    }


def chunk_object(scored: Scored) -> dict[str, Any]:
    hit = scored.hit
    details: dict[str, Any] = {
        "vector_score": scored.vector_score,
        "vector_rank": scored.vector_rank,
        "keyword_score": scored.keyword_score,
        "keyword_rank": scored.keyword_rank,
    }
    if scored.vector_rank is not None or scored.keyword_rank is not None:
        details["fusion_method"] = "rrf" if scored.fused else None
    return {
        "id": f"{hit.item_id}:{hit.position}",
        "type": "text",
        "score": scored.score,
        "text": hit.text,
        "item": {"key": hit.key, "metadata": {"heading": hit.heading, "position": hit.position}},
        "scoring_details": {key: value for key, value in details.items() if value is not None},
    }
