"""Which fine-tune a chat asks for: Workers AI sends it apart (`lora`), while OpenAI's and Anthropic's bodies have
only `model`, so there it is named after the base model and a colon (`@cf/huggingface/smollm2-135m-instruct:pirate`).
Catalog ids never contain a colon (their pattern forbids it), so the split is never ambiguous."""

from cirrus.errors import InvalidInput


def split_finetune(model: str, lora: str | None) -> tuple[str, str | None]:
    """The base model and the fine-tune (None: none) that `model` and `lora` ask for together."""
    base, colon, finetune = model.partition(":")
    if not colon:
        return model, lora
    if not finetune or not base:
        raise InvalidInput(
            f"'model' {model!r} names a fine-tune as BASE_MODEL:FINETUNE, with both parts", param="model"
        )
    if lora is not None and lora != finetune:
        raise InvalidInput(
            f"'model' names the fine-tune {finetune!r} but 'lora' names {lora!r}: send one", param="lora"
        )
    return base, finetune
