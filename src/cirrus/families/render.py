"""Render a chat template the way the serving path does: llama-cpp-python's Jinja2ChatFormatter (a sandboxed
Jinja environment with trim_blocks, lstrip_blocks, `raise_exception`, `tojson`, `strftime_now`)."""

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cirrus.families.errors import FamilyInputError

if TYPE_CHECKING:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter


@lru_cache(maxsize=32)
def _formatter(template: str, add_generation_prompt: bool) -> "Jinja2ChatFormatter":
    # Imported here: rendering happens in worker processes, and importing llama_cpp loads the engine's shared
    # library, which the API server does not otherwise need.
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    return Jinja2ChatFormatter(
        template=template, eos_token="", bos_token="", add_generation_prompt=add_generation_prompt
    )


def render_template(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    **template_kwargs: Any,
) -> str:
    """The prompt text. `template_kwargs` are the template's own switches (`enable_thinking`, ...)."""
    formatter = _formatter(template, add_generation_prompt)
    try:
        response = formatter(
            messages=list(messages),  # type: ignore[arg-type]
            tools=list(tools) if tools else None,  # type: ignore[arg-type]
            **template_kwargs,
        )
    except Exception as exc:  # a template's raise_exception() or a Jinja error on odd input
        raise FamilyInputError(f"the chat template rejected these messages: {exc}", "messages") from exc
    prompt: str = response.prompt
    return prompt
