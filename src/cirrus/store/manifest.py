"""What one packed variant is: the model it belongs to, its blob, and how it was made.

A manifest is JSON, one per (model id, quantization). `evaluation` stays empty until `cirrus eval quality`
fills it in.
"""

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MODEL_ID_PATTERN = r"^@[a-z0-9_-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
QUANTIZATION_PATTERN = r"^[A-Z0-9_]+$"
ManifestTask = Literal["text-generation", "text-embeddings"]


class ManifestError(ValueError):
    """A manifest file that is not valid JSON or misses a field."""


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["gguf", "huggingface"]
    path: str
    digest: str = Field(pattern=DIGEST_PATTERN, description="the GGUF's sha256, or the folder's (see pack)")
    quantization: str = Field(description="the source's own precision, e.g. F32, F16, Q4_1")
    requantized: bool = Field(default=False, description="made from an already-quantized source")


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = "cirrus pack"
    versions: dict[str, str]
    command: list[str]
    created_at: str
    steps: list[str] = Field(description="each conversion or quantization, in order")
    note: str = ""


class MemoryFigures(BaseModel):
    """One instance's estimated memory at `context_tokens` KV cells (cirrus.pool.memory)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context_tokens: int
    weights_bytes: int
    kv_cache_bytes: int
    compute_bytes: int
    process_bytes: int
    total_bytes: int


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    model_id: str = Field(pattern=MODEL_ID_PATTERN)
    task: ManifestTask
    architecture: str
    quantization: str = Field(pattern=QUANTIZATION_PATTERN, description="the variant's name, e.g. Q8_0")
    size: int = Field(ge=0)
    digest: str = Field(pattern=DIGEST_PATTERN)
    context_window: int = Field(ge=1)
    memory: MemoryFigures
    chat_template: bool
    license: str | None
    source: Source
    made: Provenance
    evaluation: dict[str, Any] | None = None

    @field_validator("model_id")
    @classmethod
    def _no_dot_segments(cls, model_id: str) -> str:
        if any(part in (".", "..") for part in model_id.split("/")):
            raise ValueError(f"{model_id!r}: '.' and '..' are not names")
        return model_id

    @property
    def ref(self) -> str:
        return f"{self.model_id}:{self.quantization}"

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> "Manifest":
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            first = exc.errors()[0]
            place = ".".join(str(p) for p in first["loc"]) or "the document"
            raise ManifestError(f"{where} is not a Cirrus manifest: {place}: {first['msg']}") from None


def split_ref(ref: str) -> tuple[str, str]:
    """`@cf/org/name:Q8_0` -> (`@cf/org/name`, `Q8_0`)."""
    model_id, sep, quantization = ref.rpartition(":")
    if not sep or not model_id or not quantization:
        raise ManifestError(f"not a model reference: {ref!r} (expected @cf/org/name:QUANT, e.g. ...:Q8_0)")
    return model_id, quantization.upper()


def parse_ref(ref: str) -> tuple[str, str]:
    """`split_ref`, refusing what could not name a manifest: a bad model id, a `..` segment, a bad quantization."""
    model_id, quantization = split_ref(ref)
    segments = model_id.split("/")
    if not re.fullmatch(MODEL_ID_PATTERN, model_id) or any(part in (".", "..") for part in segments):
        raise ManifestError(f"not a model reference: {ref!r} (the model id must look like @cf/org/name)")
    if not re.fullmatch(QUANTIZATION_PATTERN, quantization):
        raise ManifestError(f"not a model reference: {ref!r} ({quantization!r} is not a quantization name)")
    return model_id, quantization
