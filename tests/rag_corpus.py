"""A small corpus for AI Search tests: Markdown files, an HTML page and a PDF, each about its own topic, with a
question per document that only that document answers, so a retrieval test can tell them apart.

The PDF is written here by hand (one Helvetica text object per line), small and real: pypdf extracts its text.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CorpusDocument:
    key: str
    data: bytes
    question: str  # answered by this document alone
    answer: str  # a phrase the document states, and a grounded answer would repeat


SOURDOUGH_MD = """# Sourdough Baking

Sourdough bread rises with a starter: a culture of wild yeast and lactic acid bacteria kept in flour and water.

## Feeding the starter

Feed the starter every twelve hours with equal weights of rye flour and water. A healthy starter doubles in
volume within six hours of a feeding and smells pleasantly sour.

## Baking the loaf

Bake the loaf in a preheated cast iron dutch oven at 250 degrees Celsius for twenty minutes with the lid on,
then fifteen minutes with the lid off until the crust is deep brown.
"""

VOLCANO_MD = """# Volcanoes

## Shield volcanoes

Shield volcanoes such as Mauna Loa are built from fluid basaltic lava that flows far before it cools, giving
broad gentle slopes.

## Stratovolcanoes

Stratovolcanoes are steep cones of alternating ash and viscous andesite lava. Their eruptions are explosive:
pyroclastic flows race down the slopes at hundreds of kilometres per hour.
"""

BEES_TXT = """Honeybee colonies

A honeybee colony has one queen, thousands of female worker bees and, in summer, a few hundred male drones.
Forager bees tell their sisters where flowers are with the waggle dance: the angle of the dance to vertical
gives the direction relative to the sun, and the length of the waggle run gives the distance.
"""

CHESS_HTML = """<!DOCTYPE html>
<html>
<head><title>Chess openings</title><style>body { color: red; }</style></head>
<body>
<script>var tracking = "should never be indexed";</script>
<h1>Chess openings</h1>
<h2>The Sicilian Defence</h2>
<p>The Sicilian Defence begins 1.e4 c5: Black fights for the centre from the side and accepts an unbalanced
position with chances for both players.</p>
<h2>The Queen's Gambit</h2>
<p>In the Queen's Gambit, White offers the c4 pawn after 1.d4 d5 2.c4 to pull Black's central pawn away.</p>
</body>
</html>
"""

TIDAL_PAGES = (
    (
        "Tidal power",
        "A tidal barrage is a dam across an estuary. Turbines in its sluices turn as the tide",
        "flows in and out, twice a day, so its output is predictable years ahead.",
    ),
    (
        "The La Rance barrage in Brittany has produced electricity since 1966 with a",
        "peak capacity of 240 megawatts.",
    ),
)


def pdf_with_pages(pages: Sequence[Sequence[str]]) -> bytes:
    """A PDF whose pages show the given lines in Helvetica, one text line each (no parentheses or backslashes);
    a page without lines has no text at all, as a scan has none."""
    font = b"%d 0 R" % (2 * len(pages) + 3)  # after the catalog, the page tree and each page's two objects
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for lines in pages:
        kids.append(b"%d 0 R" % (len(objects) + 1))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
            b" /Resources << /Font << /F1 %s >> >> >>" % (len(objects) + 2, font)
        )
        objects.append(_content_stream(lines))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(pages))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return _pdf_file(objects)


def _content_stream(lines: Sequence[str]) -> bytes:
    text_ops = "".join(f"({line}) Tj T*\n" for line in lines)
    stream = f"BT /F1 11 Tf 14 TL 72 720 Td\n{text_ops}ET".encode("latin-1") if lines else b""
    return b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"


def _pdf_file(objects: list[bytes]) -> bytes:
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref_at)
    return bytes(out)


def documents() -> list[CorpusDocument]:
    return [
        CorpusDocument(
            "baking/sourdough.md",
            SOURDOUGH_MD.encode(),
            "How often should a sourdough starter be fed?",
            "every twelve hours",
        ),
        CorpusDocument(
            "geology/volcanoes.md",
            VOLCANO_MD.encode(),
            "What kind of lava builds shield volcanoes?",
            "basaltic",
        ),
        CorpusDocument(
            "nature/bees.txt",
            BEES_TXT.encode(),
            "How do forager bees tell the others where flowers are?",
            "waggle dance",
        ),
        CorpusDocument(
            "games/chess.html",
            CHESS_HTML.encode(),
            "Which first moves begin the Sicilian Defence?",
            "1.e4 c5",
        ),
        CorpusDocument(
            "energy/tidal.pdf",
            pdf_with_pages(TIDAL_PAGES),
            "Since when has the La Rance tidal barrage produced electricity?",
            "1966",
        ),
    ]


def files() -> list[tuple[str, bytes]]:
    """The corpus as uploads: (key, content) pairs, as `RagStore.add_items` takes them."""
    return [(document.key, document.data) for document in documents()]


def write_corpus(directory: Path) -> list[Path]:
    """The corpus as files under `directory`, keys as relative paths (folders made); the paths written."""
    written = []
    for document in documents():
        path = directory / document.key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(document.data)
        written.append(path)
    return written
