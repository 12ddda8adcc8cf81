"""The prompts around retrieval: the conversation an answer is generated from (the retrieved chunks as numbered
sources in a system message, then the user's own messages), and the request that rewrites a question into a
search query.

The sources go in a system message rather than into the user's turn so that a client's own system prompt and
history stay as they sent them; the numbers let an answer cite `[1]`, and the response lists the same chunks in
that order, so a citation can always be followed to its file.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from cirrus.errors import InvalidInput
from cirrus.rag.retrieval import Scored

ANSWER_INSTRUCTIONS = (
    "Answer the user's question using only the sources below. Cite the sources you use by their number, like [1]. "
    "If the sources do not contain the answer, say that you do not know."
)
NO_SOURCES = "No source matched the question: say that you do not know."
REWRITE_INSTRUCTIONS = (
    "Rewrite the user's question as a short search query for a document index. Answer with the query only."
)
Message = Mapping[str, Any]
Field = tuple[str, str]  # (where, as the client names it; the text)
SOURCES_FIELD = "messages[0].content"  # where `grounded_messages` puts the sources


def asked(query: str | None, messages: Sequence[Message] | None) -> Field:
    """The question and the field it came in, as the client names it (`query`, `messages[2].content`)."""
    if query is not None and messages is not None:
        raise InvalidInput("send either 'query' or 'messages', not both", param="query")
    if query is not None:
        if not query.strip():
            raise InvalidInput("'query' is empty: there is nothing to search for", param="query")
        return "query", query
    for index, message in reversed(list(enumerate(messages or ()))):
        if message.get("role") == "user":
            text = _text_of(message.get("content"))
            if text.strip():
                return f"messages[{index}].content", text
    raise InvalidInput("send 'query', or 'messages' with a user message that has text", param="messages")


def message_fields(messages: Sequence[Message]) -> list[Field]:
    """Each message's text, named as the client's protocol names it."""
    return [
        (f"messages[{index}].content", _text_of(message.get("content")))
        for index, message in enumerate(messages)
        if message.get("content") is not None
    ]


def grounded_messages(
    messages: Sequence[Message], sources: Sequence[Scored], instructions: str = ANSWER_INSTRUCTIONS
) -> list[dict[str, Any]]:
    """The conversation the answer is generated from: the sources first, then the client's messages."""
    system = {"role": "system", "content": _sources_prompt(sources, instructions)}
    return [system, *(dict(message) for message in messages)]


def rewrite_messages(question: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": REWRITE_INSTRUCTIONS}, {"role": "user", "content": question}]


def rewritten_query(answer: str, question: str) -> str:
    """The model's query, on one line; the question itself when the model wrote nothing usable."""
    line = answer.strip().splitlines()[0].strip().strip('"') if answer.strip() else ""
    return line if line else question


def _sources_prompt(sources: Sequence[Scored], instructions: str) -> str:
    if not sources:
        return f"{instructions}\n\n{NO_SOURCES}"
    numbered = "\n\n".join(
        f"[{number}] ({source.hit.key})\n{source.hit.text}" for number, source in enumerate(sources, start=1)
    )
    return f"{instructions}\n\nSources:\n\n{numbered}"


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of typed parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""
