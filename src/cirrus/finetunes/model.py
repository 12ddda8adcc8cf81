"""What a fine-tune is: a named LoRA adapter of one account for one base model, and the adapter inference uses
once both of its assets are uploaded and converted."""

import re
from dataclasses import dataclass
from enum import StrEnum

NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
NAME_RULE = "1 to 64 letters, digits, '.', '_' or '-'"


class Asset(StrEnum):
    """The two PEFT files Workers AI asks for, by the names PEFT writes them under."""

    CONFIG = "adapter_config.json"
    WEIGHTS = "adapter_model.safetensors"


@dataclass(frozen=True)
class Finetune:
    """`config_digest` and `weights_digest` name the uploaded assets in the blob store; `adapter_digest` and
    `adapter_path`, the GGUF adapter converted from them (None until both were uploaded and converted)."""

    id: str
    account_id: str
    name: str
    description: str | None
    model: str
    created_at: float
    modified_at: float
    config_digest: str | None = None
    weights_digest: str | None = None
    adapter_digest: str | None = None
    adapter_path: str | None = None

    @property
    def ready(self) -> bool:
        return self.adapter_digest is not None

    @property
    def digests(self) -> dict[Asset, str]:
        """The uploaded assets' digests."""
        digests = {Asset.CONFIG: self.config_digest, Asset.WEIGHTS: self.weights_digest}
        return {asset: digest for asset, digest in digests.items() if digest is not None}

    @property
    def uploaded(self) -> list[Asset]:
        return list(self.digests)

    @property
    def missing(self) -> list[Asset]:
        return [asset for asset in Asset if asset not in self.uploaded]


@dataclass(frozen=True)
class Adapter:
    """A ready fine-tune as inference applies it: the GGUF LoRA adapter at `path`, content-addressed by
    `digest` (the same digest is the same adapter, whichever finetune names it)."""

    finetune_id: str
    name: str
    digest: str
    path: str
