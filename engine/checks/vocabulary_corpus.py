"""The texts vocabulary.py tokenizes: Markdown files, Unicode and whitespace edge cases, special-token texts
embedded in text, and the vocabulary's own token texts in runs."""

import glob
import os
from collections.abc import Sequence

UNICODE_TEXTS = (
    "",
    " ",
    "\n",
    "Hello world",
    " Hello world",
    "Hello  world   with    runs     of      spaces",
    "\t\ttabs\tand\nnewlines\n\n\nand\r\nCRLF\r\n",
    "          \n          \n\t \t \t",
    "Café, naïve, façade, jalapeño, Ångström, Øresund, Straße, İstanbul, ǅemal",
    "e\u0301 (combining acute) vs \u00e9, A\u030a vs \u00c5",
    "日本語のテキスト、漢字とひらがなとカタカナ。中文文本：你好，世界！한국어 텍스트입니다.",
    "Emoji: 😀😃😄😁 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷 ❤️ 🤖",
    "RTL: שלום עולם, مرحبا بالعالم, سلام دنیا",
    "Mixed: abc123 ١٢٣ ४५६ ½ ² ∑∫√∞ ≠ ≤ ≥ → ← ↔",
    "Zero width:\u200b\u200c\u200d\ufeff and NBSP:\u00a0\u00a0 and ideographic space:\u3000",
    "Code: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // comment\n    return sum;\n",
    "URL https://example.com/path?query=1&x=%20#frag and email foo.bar@example.org",
    "Numbers 0 1 12 123 1234 12345 123456 3.14159 -2.5e-10 1,000,000",
    "'s 't 're 've 'm 'll 'd ' S ' T",
    "<html><body><p>Not special</p></body></html>",
    "\x00\x01\x02 control chars \x7f",
    "".join(chr(c) for c in range(0x20, 0x7F)),
    "Ω≈ç√∫˜µ≤≥÷ åß∂ƒ©˙∆˚¬…æ œ∑´®†¥¨ˆøπ“‘ «»",
    "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖ×ØÙÚÛÜÝÞßàáâãäåæçèéêëìíîïðñòóôõö÷øùúûüýþÿ",
    "𝕳𝖊𝖑𝖑𝖔 𝓦𝓸𝓻𝓵𝓭 (astral plane)",
    "▁▁leading sentencepiece marks▁ and Ġ Ċ byte-level marks",
)
SEPARATORS = (b"Hello", b" ", b"\n", b"world ", b"  x", b"", "é日😀".encode())
SPECIALS_PER_TEXT = 32
SINGLE_SPECIAL_TEXTS = 2000
TOKENS_PER_RUN = 64
QUICK_MARKDOWN_FILES = 5


def corpus(
    markdown_root: str, token_texts: Sequence[bytes], special_ids: Sequence[int], quick: bool
) -> dict[str, bytes]:
    """Every text by a name that says where it came from; quick keeps only the first few Markdown files."""
    return {
        **markdown_texts(markdown_root, quick),
        **{f"unicode:{i}": text.encode("utf-8") for i, text in enumerate(UNICODE_TEXTS)},
        **special_texts(token_texts, special_ids),
        **vocabulary_runs(token_texts),
    }


def markdown_texts(root: str, quick: bool) -> dict[str, bytes]:
    paths = sorted(glob.glob(os.path.join(root, "**", "*.md"), recursive=True))
    texts = {}
    for path in paths[:QUICK_MARKDOWN_FILES] if quick else paths:
        with open(path, "rb") as f:
            texts["md:" + os.path.relpath(path, root)] = f.read()
    return texts


def special_texts(token_texts: Sequence[bytes], special_ids: Sequence[int]) -> dict[str, bytes]:
    """Special tokens' texts between ordinary text, some twice in a row; and each alone inside a few letters."""
    texts = {}
    for start in range(0, len(special_ids), SPECIALS_PER_TEXT):
        parts = []
        for k, token in enumerate(special_ids[start : start + SPECIALS_PER_TEXT]):
            parts += [SEPARATORS[k % len(SEPARATORS)], token_texts[token]]
            if k % 3 == 0:
                parts.append(token_texts[token])
        parts.append(b" end")
        texts[f"special:{start}"] = b"".join(parts)
    for token in special_ids[:SINGLE_SPECIAL_TEXTS]:
        texts[f"special1:{token}"] = b"a" + token_texts[token] + b" b"
    return texts


def vocabulary_runs(token_texts: Sequence[bytes]) -> dict[str, bytes]:
    """The vocabulary's texts concatenated in runs of consecutive ids."""
    return {
        f"vocab:{start}": b"".join(token_texts[start : start + TOKENS_PER_RUN])
        for start in range(0, len(token_texts), TOKENS_PER_RUN)
    }
