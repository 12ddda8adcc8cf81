"""Documents to Markdown: each supported type from the test corpus, and the refusals, each naming the file."""

import pytest

from cirrus.errors import InvalidInput
from cirrus.rag.documents import (
    MAX_DOCUMENT_BYTES,
    SUPPORTED,
    UnreadableDocument,
    UnsupportedDocument,
    to_markdown,
)
from tests.rag_corpus import SOURDOUGH_MD, CorpusDocument, documents, pdf_with_pages


def corpus(key: str) -> CorpusDocument:
    return next(document for document in documents() if document.key == key)


def converted(key: str) -> str:
    return to_markdown(key, corpus(key).data)


def test_markdown_and_text_are_kept_as_they_are() -> None:
    assert converted("baking/sourdough.md") == SOURDOUGH_MD
    assert converted("nature/bees.txt").startswith("Honeybee colonies\n\nA honeybee colony has one queen")


def test_html_keeps_headings_as_atx_and_drops_scripts_and_styles() -> None:
    markdown = converted("games/chess.html")
    assert markdown.startswith("# Chess openings\n")
    assert "\n## The Sicilian Defence\n" in markdown and "\n## The Queen's Gambit\n" in markdown
    assert "1.e4 c5" in markdown
    assert "tracking" not in markdown and "color: red" not in markdown


def test_an_html_page_without_a_top_heading_gets_its_title_as_one() -> None:
    page = "<html><head><title>Release notes</title></head><body><p>Faster startup.</p></body></html>"
    assert to_markdown("notes.htm", page.encode()) == "# Release notes\n\nFaster startup."


def test_html_in_another_declared_encoding_is_decoded() -> None:
    page = (
        '<html><head><meta charset="iso-8859-1"></head><body><h1>Café</h1><p>Crème brûlée</p></body></html>'
    )
    markdown = to_markdown("menu.html", page.encode("latin-1"))
    assert "# Café" in markdown and "Crème brûlée" in markdown


def test_a_pdf_gives_its_text_page_by_page() -> None:
    markdown = converted("energy/tidal.pdf")
    first, second = markdown.split("\n\n")
    assert first.startswith("Tidal power\nA tidal barrage is a dam across an estuary.")
    assert second.startswith("The La Rance barrage in Brittany has produced electricity since 1966")


def test_the_type_comes_from_the_last_extension_in_any_case() -> None:
    assert to_markdown("Docs/v1.2/Guide.MD", b"# Guide\n\nRead me.") == "# Guide\n\nRead me."


def test_an_unknown_type_is_refused_naming_the_supported_ones() -> None:
    with pytest.raises(UnsupportedDocument) as refused:
        to_markdown("reports/q3.docx", b"PK\x03\x04")
    assert isinstance(refused.value, InvalidInput)
    assert "'reports/q3.docx'" in refused.value.message
    assert all(extension in refused.value.message for extension in SUPPORTED)


def test_text_that_is_not_utf8_is_refused_saying_where() -> None:
    with pytest.raises(UnreadableDocument, match=r"'notes\.txt' is not UTF-8 text \(byte 0xe9 at offset 3\)"):
        to_markdown("notes.txt", "Caf\u00e9".encode("latin-1"))


def test_a_byte_order_mark_and_windows_newlines_are_normalised() -> None:
    assert to_markdown("a.md", b"\xef\xbb\xbf# A\r\n\r\nText\r\n") == "# A\n\nText\n"


def test_a_pdf_without_text_is_refused_naming_it() -> None:
    with pytest.raises(UnreadableDocument, match=r"'scans/page\.pdf' is a PDF without text"):
        to_markdown("scans/page.pdf", pdf_with_pages([[], []]))


def test_a_broken_pdf_is_refused_naming_it() -> None:
    with pytest.raises(UnreadableDocument, match=r"'broken\.pdf' is not a readable PDF"):
        to_markdown("broken.pdf", b"%PDF-1.4\nnot really a pdf")


def test_a_document_without_text_is_refused() -> None:
    with pytest.raises(UnreadableDocument, match=r"'empty\.md' has no text to index"):
        to_markdown("empty.md", b"  \n\n")
    with pytest.raises(UnreadableDocument, match=r"'blank\.html' has no text to index"):
        to_markdown("blank.html", b"<html><style>p {}</style><body><script>x()</script></body></html>")


def test_a_document_over_the_size_limit_is_refused() -> None:
    with pytest.raises(UnreadableDocument, match=f"'big.txt' is {MAX_DOCUMENT_BYTES + 1} bytes"):
        to_markdown("big.txt", b"a" * (MAX_DOCUMENT_BYTES + 1))
