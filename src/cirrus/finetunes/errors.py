"""The fine-tune errors that have a Workers AI code of their own (its published table: 3039, 5005), and the
server's own refusal when it cannot convert adapters at all."""

from typing import ClassVar

from cirrus.errors import CirrusError, InvalidInput


class FinetuneAssetsMissing(InvalidInput):
    """Workers AI's "Finetune missing required files" (3039)."""

    code = 3039


class LoraUnsupported(InvalidInput):
    """Workers AI's "LoRa unsupported" (5005), answered 400 here: the model exists, but takes no adapters."""

    code = 5005
    openai_code: ClassVar[str | None] = "lora_unsupported"


class ConverterUnavailable(CirrusError):
    """llama.cpp's LoRA converter is not installed on this server: no adapter can be made ready until it is."""

    status = 501
    code = 3000
    openai_code: ClassVar[str | None] = "converter_unavailable"
