"""The text models are evaluated on: the user's file, or docstrings from Python's standard library.

Every Python install carries the standard library, so the default corpus is the same wherever the same Python
version runs, and its digest in each report says which text was measured.
"""

import hashlib
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODULES = (
    "argparse",
    "bisect",
    "collections",
    "csv",
    "dataclasses",
    "datetime",
    "functools",
    "heapq",
    "itertools",
    "json",
    "logging",
    "pathlib",
    "queue",
    "random",
    "shutil",
    "statistics",
    "string",
    "subprocess",
    "textwrap",
    "threading",
)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class CorpusError(ValueError):
    pass


@dataclass(frozen=True)
class Corpus:
    text: str
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def _docstrings(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    docs = [inspect.getdoc(module) or ""]
    for name in sorted(vars(module)):
        member = getattr(module, name)
        if name.startswith("_") or getattr(member, "__module__", None) != module_name:
            continue
        if inspect.isclass(member) or inspect.isfunction(member):
            docs.append(inspect.getdoc(member) or "")
    return [doc for doc in docs if doc.strip()]


def default_corpus() -> Corpus:
    parts = [doc for name in DEFAULT_MODULES for doc in _docstrings(name)]
    return Corpus("\n\n".join(parts), "python-stdlib-docstrings")


def load_corpus(path: Path | None) -> Corpus:
    if path is None:
        return default_corpus()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(f"corpus file not found: {path}") from None
    except UnicodeDecodeError:
        raise CorpusError(f"corpus file is not UTF-8 text: {path}") from None
    except OSError as exc:
        raise CorpusError(f"cannot read corpus file {path}: {exc.strerror}") from None
    if not text.strip():
        raise CorpusError(f"corpus file is empty: {path}")
    return Corpus(text, str(path))


def sentences(text: str, limit: int, min_words: int = 5, max_words: int = 60) -> list[str]:
    """Up to `limit` sentences of moderate length, in corpus order, for embedding comparisons."""
    found: list[str] = []
    for paragraph in text.split("\n\n"):
        for sentence in SENTENCE_END.split(" ".join(paragraph.split())):
            if min_words <= len(sentence.split()) <= max_words:
                found.append(sentence)
                if len(found) == limit:
                    return found
    return found
