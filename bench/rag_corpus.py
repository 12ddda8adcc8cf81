"""bench/rag.py's corpus: the pydoc text of standard library modules as Markdown, one document per module.

pydoc's plain text (`pydoc.render_doc(module, renderer=pydoc.plaintext)`) has sections in capitals at the
margin (NAME, DESCRIPTION, CLASSES, FUNCTIONS, DATA...), each entry of CLASSES and FUNCTIONS at four spaces, a
class's body behind "     |  ". That becomes `# module`, `## Description`..., `### class Name` and `### name()`, so AI Search's chunker finds the
headings it is built for. Left out, as docs.python.org does not repeat them on every page: the MODULE REFERENCE
and FILE sections (a link and boilerplate, a path on this machine) and each class's "... inherited from ..."
blocks (the whole of `dict`'s methods again under every dict subclass).
"""

import importlib
import pydoc
import re
from collections.abc import Iterator

_SECTION = re.compile(r"^[A-Z][A-Z ]*[A-Z]$")
_DROPPED_SECTIONS = frozenset({"MODULE REFERENCE", "FILE"})
_CLASS_ENTRY = re.compile(r"^    (?:\w+ = )?class (\w+)")
_FUNCTION_ENTRY = re.compile(r"^    (\w+)(?:\(| = | lambda)")
_CLASS_BODY = re.compile(r"^     \|(?:  )?")
_CLASS_RULE = re.compile(r"^     \|  -{20,}$")
_INHERITED = re.compile(r"^     \|  [A-Z][\w ]* inherited from \S+:$")


def module_markdown(name: str) -> str:
    """The module's pydoc text as Markdown."""
    text = pydoc.plain(
        pydoc.render_doc(importlib.import_module(name))
    )  # as renderer=pydoc.plaintext gives it
    lines = [f"# {name}", ""]
    for title, body in _sections(text.splitlines()):
        if title in _DROPPED_SECTIONS:
            continue
        lines += [f"## {title.capitalize()}", ""]
        lines += _entries_markdown(title, body)
    return "\n".join(lines).rstrip() + "\n"


def _sections(lines: list[str]) -> Iterator[tuple[str, list[str]]]:
    """(title, lines) per top-level section; the banner line before the first is dropped."""
    title: str | None = None
    body: list[str] = []
    for line in lines:
        if _SECTION.match(line):
            if title is not None:
                yield title, body
            title, body = line, []
        elif title is not None:
            body.append(line)
    if title is not None:
        yield title, body


def _entries_markdown(section: str, body: list[str]) -> list[str]:
    """A section's lines, a `###` heading before each class or function entry."""
    entry = {"CLASSES": _CLASS_ENTRY, "FUNCTIONS": _FUNCTION_ENTRY}.get(section)
    out: list[str] = []
    class_body: list[str] = []
    for line in body:
        if _CLASS_BODY.match(line):
            class_body.append(line)
            continue
        out += _class_body_markdown(class_body)
        class_body = []
        found = entry.match(line) if entry else None
        if found:
            heading = f"class {found.group(1)}" if section == "CLASSES" else f"{found.group(1)}()"
            out += ["", f"### {heading}", ""]
        out.append(line)
    return out + _class_body_markdown(class_body)


def _class_body_markdown(lines: list[str]) -> list[str]:
    """A class's body without its " |  " margin and without the blocks of what it inherits (from a line
    "Methods inherited from X:" to the next rule)."""
    out: list[str] = []
    inherited = False
    for line in lines:
        if _CLASS_RULE.match(line):
            inherited = False
        elif _INHERITED.match(line):
            inherited = True
        elif not inherited:
            out.append("    " + _CLASS_BODY.sub("", line) if line.strip(" |") else "")
    return out
