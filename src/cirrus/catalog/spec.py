"""What the catalog says about one model."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cirrus.guardrails.patterns import compile_deny_patterns
from cirrus.store.manifest import ManifestError, parse_ref
from cirrus.store.oci import InvalidArtifact, Reference

Task = Literal["text-generation", "text-embeddings"]
OutputFilterName = Literal["email", "phone", "card"]


class ArtifactRef(BaseModel):
    """Where a model's GGUF comes from: a file path, a file inside an installed package, an assembler, an OCI
    registry reference (pulled into the local cache on first use), or a variant packed into the local store."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = None
    package: str | None = None
    file: str | None = None
    assemble: str | None = Field(
        default=None, description="module whose assemble(output_path) writes the file"
    )
    oci: str | None = Field(
        default=None, description="an OCI reference, e.g. 127.0.0.1:5000/models/smollm2:q4_1"
    )
    insecure: bool = Field(default=False, description="pull the oci reference over plain HTTP")
    store: str | None = Field(
        default=None, description="a variant `cirrus pack` stored locally, e.g. @cf/org/name:Q8_0"
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> "ArtifactRef":
        sources = [
            self.path is not None,
            self.package is not None,
            self.assemble is not None,
            self.oci is not None,
            self.store is not None,
        ]
        if sum(sources) != 1:
            raise ValueError(
                "an artifact names exactly one of: path, package (with file), assemble, oci, store"
            )
        if self.oci is not None:
            try:
                Reference.parse(self.oci)
            except InvalidArtifact as exc:
                raise ValueError(str(exc)) from exc
        if self.store is not None:
            try:
                parse_ref(self.store)
            except ManifestError as exc:
                raise ValueError(str(exc)) from exc
        if self.package is not None and not self.file:
            raise ValueError("a package artifact needs 'file', the GGUF's name inside the package")
        return self

    def describe(self) -> str:
        if self.path is not None:
            return f"file {self.path}"
        if self.package is not None:
            return f"package {self.package} ({self.file})"
        if self.oci is not None:
            return f"OCI artifact {self.oci}"
        if self.store is not None:
            return f"packed artifact {self.store}"
        return f"package {self.assemble} (assembled)"


class Pricing(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_million: float = Field(default=0.0, ge=0)
    output_per_million: float = Field(default=0.0, ge=0)
    cached_input_per_million: float | None = Field(
        default=None,
        ge=0,
        description="prompt tokens served from the prefix cache (default: the input price)",
    )

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        """USD for one request; cached prompt tokens at the cached-input price."""
        cached_price = (
            self.input_per_million if self.cached_input_per_million is None else self.cached_input_per_million
        )
        fresh = prompt_tokens - cached_tokens
        return (
            fresh * self.input_per_million
            + cached_tokens * cached_price
            + completion_tokens * self.output_per_million
        ) / 1_000_000


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^@[a-z0-9_-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    task: Task = "text-generation"
    description: str = ""
    artifact: ArtifactRef
    context_window: int = Field(default=4096, ge=128)
    max_tokens_default: int = Field(default=256, ge=1)
    pricing: Pricing = Pricing()
    keep_alive_s: float | None = Field(default=None, ge=0)
    max_instances: int = Field(default=1, ge=1)
    parallel: int = Field(default=4, ge=1, le=64, description="sequences one instance decodes together")
    kv_cache_tokens: int | None = Field(
        default=None,
        ge=128,
        description="KV cache cells shared by an instance's sequences (default: parallel x context)",
    )
    host_cache_tokens: int | None = Field(
        default=None,
        ge=0,
        description="tokens of KV prefixes kept in host memory once evicted from the KV cache "
        "(default: half as many as the KV cache holds; 0: none)",
    )
    pinned: bool = False
    chat_template: str | None = None
    install_hint: str = ""
    requests_per_minute: int | None = Field(default=None, ge=1, description="default: Workers AI's per task")
    tokens_per_minute: int | None = Field(default=None, ge=1)
    fallbacks: tuple[str, ...] = Field(default=(), description="models tried in order when this one fails")
    max_attempts: int = Field(default=1, ge=1, le=5, description="tries on capacity errors and crashes")
    deny_patterns: tuple[str, ...] = Field(default=(), description="regular expressions refused in input")
    output_filters: tuple[OutputFilterName, ...] = ()
    output_deny_patterns: tuple[str, ...] = ()
    family: str | None = Field(
        default=None,
        description="chat format (cirrus.families: glm4, glm45, glm47, kimi_k2, kimi_k25); default: detected from the GGUF template",
    )
    architecture: str | None = Field(default=None, description="llama.cpp's name, e.g. glm4, deepseek2")
    parameters: float | None = Field(default=None, gt=0, description="total parameters, in billions")
    active_parameters: float | None = Field(
        default=None, gt=0, description="parameters one token passes through (mixture of experts), billions"
    )
    kv_bytes_per_token: int | None = Field(
        default=None, ge=1, description="f16 KV cache bytes one token takes in llama.cpp (all layers)"
    )
    lora_base: str | None = Field(
        default=None,
        min_length=1,
        description="the Hugging Face id LoRA adapters for this model name as their base_model_name_or_path; "
        "set only on text-generation models that accept fine-tunes",
    )

    @field_validator("family")
    @classmethod
    def _known_family(cls, name: str | None) -> str | None:
        if name is not None:
            from cirrus.families.registry import FAMILIES  # imports the engine's Jinja layer: only when named

            if name not in FAMILIES:
                raise ValueError(f"unknown model family {name!r}; known: {', '.join(sorted(FAMILIES))}")
        return name

    @model_validator(mode="after")
    def _active_within_total(self) -> "ModelSpec":
        active, total = self.active_parameters, self.parameters
        if active is not None and (total is None or active > total):
            raise ValueError("active_parameters needs parameters, the total, at least as large")
        return self

    @model_validator(mode="after")
    def _lora_on_text_generation(self) -> "ModelSpec":
        if self.lora_base is not None and self.task != "text-generation":
            raise ValueError("lora_base is for text-generation models: adapters change how a model writes")
        return self

    @field_validator("deny_patterns", "output_deny_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        compile_deny_patterns(patterns)  # a bad pattern fails the catalog at load, not a request later
        return patterns

    @property
    def kv_cells(self) -> int:
        return self.kv_cache_tokens or self.parallel * self.context_window

    @property
    def host_cache_cells(self) -> int:
        return self.kv_cells // 2 if self.host_cache_tokens is None else self.host_cache_tokens
