"""A small byte-level BPE vocabulary ("gpt2" in llama.cpp's terms) with a family's special tokens.

Every byte has its own token, so any text tokenizes; a few hundred merges learned from a fixed text make common
words a token or two; the family's markers (`<|user|>`, `<tool_call>`, ...) come last, as control tokens, so
llama.cpp keeps each one whole when it tokenizes a rendered chat prompt.
"""

from collections import Counter
from dataclasses import dataclass
from functools import cache
from itertools import pairwise

import gguf

_MERGE_TEXT = """
You are a helpful assistant. The user asks a question and the assistant answers it with care. What is the
weather like today in Paris? It is sunny and warm, with a light wind from the west. Please call the tool to get
the weather for the city, then tell the user what it said. Think about the question before you answer: the
answer should be short, correct and kind. Hello, how are you? I am fine, thank you for asking. Here is the
result of the function call: the temperature is twenty degrees. Write a poem about the sea and the sky.
"""
_MERGE_COUNT = 240


_GLM_SPECIALS = (
    "<|endoftext|> [MASK] [gMASK] [sMASK] <sop> <eop> <|system|> <|user|> <|assistant|> <|observation|> "
    "<think> </think> <tool_call> </tool_call> <tool_response> </tool_response> <arg_key> </arg_key> "
    "<arg_value> </arg_value> /nothink"
)
_KIMI_SPECIALS = (
    "[BOS] [EOS] <|im_end|> <|im_user|> <|im_assistant|> <|im_system|> <|im_middle|> "
    "<|tool_calls_section_begin|> <|tool_calls_section_end|> <|tool_call_begin|> <|tool_call_argument_begin|> "
    "<|tool_call_end|> <think> </think>"
)


@dataclass(frozen=True)
class TokenFamily:
    """A family's special tokens and which of them llama.cpp should treat as bos, eos and friends."""

    name: str
    pre_tokenizer: str  # a `tokenizer.ggml.pre` value llama.cpp knows
    specials: tuple[str, ...]
    bos: str
    eos: str
    eot: str | None = None
    eom: str | None = None


GLM_TOKENS = TokenFamily(
    name="glm",
    pre_tokenizer="glm4",
    specials=tuple(_GLM_SPECIALS.split()),
    bos="[gMASK]",
    eos="<|endoftext|>",
    eot="<|user|>",
    eom="<|observation|>",
)
CHATGLM_TOKENS = TokenFamily(
    name="chatglm",
    pre_tokenizer="chatglm-bpe",
    specials=GLM_TOKENS.specials,
    bos="[gMASK]",
    eos="<|endoftext|>",
    eot="<|user|>",
)
KIMI_TOKENS = TokenFamily(
    name="kimi",
    pre_tokenizer="kimi-k2",
    specials=tuple(_KIMI_SPECIALS.split()),
    bos="[BOS]",
    eos="<|im_end|>",
)
TOKEN_FAMILIES: dict[str, TokenFamily] = {f.name: f for f in (GLM_TOKENS, CHATGLM_TOKENS, KIMI_TOKENS)}


@dataclass(frozen=True)
class Vocabulary:
    tokens: tuple[str, ...]
    types: tuple[int, ...]
    merges: tuple[str, ...]
    family: TokenFamily

    def id_of(self, token: str) -> int:
        return self.tokens.index(token)

    def write(self, writer: gguf.GGUFWriter) -> None:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(self.family.pre_tokenizer)
        writer.add_token_list(list(self.tokens))
        writer.add_token_types(list(self.types))
        writer.add_token_merges(list(self.merges))
        writer.add_bos_token_id(self.id_of(self.family.bos))
        writer.add_eos_token_id(self.id_of(self.family.eos))
        writer.add_unk_token_id(self.id_of(self.family.eos))
        writer.add_pad_token_id(self.id_of(self.family.eos))
        if self.family.eot is not None:
            writer.add_eot_token_id(self.id_of(self.family.eot))
        if self.family.eom is not None:
            writer.add_eom_token_id(self.id_of(self.family.eom))
        writer.add_add_bos_token(False)  # the families' chat templates write their own prefix


def vocabulary(family: TokenFamily) -> Vocabulary:
    pieces, merges = _byte_level_bpe()
    tokens = (*pieces, *family.specials)
    types = (int(gguf.TokenType.NORMAL),) * len(pieces) + (int(gguf.TokenType.CONTROL),) * len(
        family.specials
    )
    return Vocabulary(tokens, types, merges, family)


@cache
def _byte_level_bpe() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The 256 byte tokens, then one token per merge learned from `_MERGE_TEXT` (deterministic)."""
    alphabet = byte_alphabet()
    words = Counter(tuple(alphabet[b] for b in (" " + word).encode("utf-8")) for word in _MERGE_TEXT.split())
    pieces = [alphabet[b] for b in range(256)]
    merges: list[str] = []
    for _ in range(_MERGE_COUNT):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            for pair in pairwise(word):
                pairs[pair] += count
        if not pairs:
            break
        best = max(pairs, key=lambda pair: (pairs[pair], pair))
        merges.append(f"{best[0]} {best[1]}")
        if best[0] + best[1] not in pieces:  # two merges can spell the same piece
            pieces.append(best[0] + best[1])
        words = Counter({_merge(word, best): count for word, count in words.items()})
    return tuple(pieces), tuple(merges)


def _merge(word: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    merged: list[str] = []
    index = 0
    while index < len(word):
        if word[index : index + 2] == pair:
            merged.append(pair[0] + pair[1])
            index += 2
        else:
            merged.append(word[index])
            index += 1
    return tuple(merged)


def byte_alphabet() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte, the alphabet llama.cpp's byte-level BPE expects."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping
