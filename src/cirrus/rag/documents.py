"""Uploaded documents to Markdown, the one form the chunker reads.

Markdown and plain text are kept as they are; HTML goes through markdownify with its scripts and styles removed
and headings written ATX-style (`## Title`), so the chunker finds them; a PDF gives its text page by page
(pypdf), pages a blank line apart. A document is refused with a message naming it: an unknown type, text that
is not UTF-8, a PDF that cannot be read or has no text (a scan), or a document with nothing to index.
"""

import io
from collections.abc import Callable
from pathlib import PurePosixPath

from bs4 import BeautifulSoup
from markdownify import MarkdownConverter
from pypdf import PdfReader
from pypdf.errors import PyPdfError

from cirrus.errors import InvalidInput

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024  # Cloudflare AI Search's limit per file
_INVISIBLE_HTML = ("script", "style", "noscript", "template", "head")


class UnsupportedDocument(InvalidInput):
    """A file of a type AI Search does not index."""


class UnreadableDocument(InvalidInput):
    """A file of a supported type whose content cannot be read as one."""


def to_markdown(key: str, data: bytes) -> str:
    """The document's text as Markdown; `key` (the file's name, folders included) gives its type."""
    if len(data) > MAX_DOCUMENT_BYTES:
        raise UnreadableDocument(
            f"'{key}' is {len(data)} bytes, more than the {MAX_DOCUMENT_BYTES} bytes a document may have"
        )
    convert = _CONVERTERS.get(PurePosixPath(key).suffix.lower())
    if convert is None:
        raise UnsupportedDocument(f"'{key}' is not a supported document; supported: {', '.join(SUPPORTED)}")
    markdown = convert(key, data)
    if not markdown.strip():
        raise UnreadableDocument(f"'{key}' has no text to index")
    return markdown


def _text(key: str, data: bytes) -> str:
    try:
        return _normalised_newlines(data.decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        raise UnreadableDocument(
            f"'{key}' is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from None


def _html(key: str, data: bytes) -> str:
    """BeautifulSoup finds the encoding (a meta charset, a BOM, or a guess); the page's title becomes its top
    heading when the body has none."""
    soup = BeautifulSoup(data, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup.find_all(_INVISIBLE_HTML):
        tag.decompose()
    converter = MarkdownConverter(heading_style="ATX", escape_asterisks=False, escape_underscores=False)
    markdown = _normalised_newlines(converter.convert_soup(soup))
    if title and soup.find("h1") is None:
        return f"# {title}\n\n{markdown}"
    return markdown


def _pdf(key: str, data: bytes) -> str:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableDocument(f"'{key}' is an encrypted PDF; upload it without a password")
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError) as error:  # pypdf's parser raises all of these
        raise UnreadableDocument(f"'{key}' is not a readable PDF: {error}") from None
    text = "\n\n".join(_normalised_newlines(page).strip() for page in pages if page.strip())
    if not text:
        raise UnreadableDocument(
            f"'{key}' is a PDF without text (a scan?); only PDFs with a text layer are read"
        )
    return text


def _normalised_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


_CONVERTERS: dict[str, Callable[[str, bytes], str]] = {
    ".md": _text,
    ".markdown": _text,
    ".txt": _text,
    ".html": _html,
    ".htm": _html,
    ".pdf": _pdf,
}
SUPPORTED = tuple(_CONVERTERS)
