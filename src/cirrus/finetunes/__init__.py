"""LoRA fine-tunes (Workers AI's `/ai/finetunes`): PEFT adapters an account uploads for a catalog model, checked,
converted to llama.cpp's GGUF LoRA format and stored content-addressed, then named per request by `lora`."""

from cirrus.finetunes.model import NAME_PATTERN, NAME_RULE, Adapter, Asset, Finetune
from cirrus.finetunes.store import FinetuneStore

__all__ = ["NAME_PATTERN", "NAME_RULE", "Adapter", "Asset", "Finetune", "FinetuneStore"]
