"""`cirrus rag`: AI Search from the command line, against a running gateway.

`create NAME [--embedding-model M] [--chat-model M] [--hybrid]`, `list`, `delete NAME`; `add NAME DIR` uploads
every Markdown, text, HTML and PDF file under DIR (keys are their paths relative to DIR) and shows a progress bar
until they are indexed; `search NAME QUERY` prints the matching chunks; `ask NAME QUESTION` prints an answer with
its sources."""

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm  # type: ignore[import-untyped]

from cirrus.cli_client import CliCallError, add_connection, call, exit_status, print_table

SUFFIXES = (".md", ".markdown", ".txt", ".html", ".htm", ".pdf")
TIMEOUT_S = 300.0
POLL_S = 0.5
INSTANCES = "/ai-search/instances"


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    rag = commands.add_parser("rag", help="AI Search: answers from your own documents")
    verbs = rag.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="create an AI Search instance")
    create.add_argument("name")
    create.add_argument("--embedding-model")
    create.add_argument("--chat-model")
    create.add_argument("--hybrid", action="store_true", help="fuse keyword (BM25) with vector retrieval")
    create.set_defaults(handler=cmd_create)
    listing = verbs.add_parser("list", help="the account's instances")
    listing.set_defaults(handler=cmd_list)
    delete = verbs.add_parser("delete", help="delete an instance with its files and chunks")
    delete.add_argument("name")
    delete.set_defaults(handler=cmd_delete)
    add = verbs.add_parser("add", help="upload a folder's documents and wait until they are indexed")
    add.add_argument("name")
    add.add_argument("folder", type=Path)
    add.set_defaults(handler=cmd_add)
    search = verbs.add_parser("search", help="the chunks that match a query")
    search.add_argument("name")
    search.add_argument("query")
    search.set_defaults(handler=cmd_search)
    ask = verbs.add_parser("ask", help="an answer from the instance's documents, with its sources")
    ask.add_argument("name")
    ask.add_argument("question")
    ask.set_defaults(handler=cmd_ask)
    for verb in (create, listing, delete, add, search, ask):
        add_connection(verb, os.environ.get("CIRRUS_TOKEN"))


def cmd_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"id": args.name, "hybrid_search_enabled": args.hybrid}
    if args.embedding_model:
        body["embedding_model"] = args.embedding_model
    if args.chat_model:
        body["ai_search_model"] = args.chat_model
    return exit_status(lambda: print(call(args, "POST", INSTANCES, TIMEOUT_S, json=body)["id"]))


def cmd_list(args: argparse.Namespace) -> int:
    def show() -> None:
        instances = call(args, "GET", INSTANCES, TIMEOUT_S)
        rows = [("NAME", "EMBEDDING MODEL", "CHAT MODEL", "HYBRID", "CREATED")]
        rows += [
            (
                i["id"],
                i["embedding_model"],
                i["ai_search_model"],
                str(i["hybrid_search_enabled"]).lower(),
                i["created_at"],
            )
            for i in instances
        ]
        print_table(rows)

    return exit_status(show)


def cmd_delete(args: argparse.Namespace) -> int:
    return exit_status(lambda: call(args, "DELETE", f"{INSTANCES}/{args.name}", TIMEOUT_S))


def cmd_add(args: argparse.Namespace) -> int:
    return exit_status(lambda: add_folder(args))


def add_folder(args: argparse.Namespace) -> None:
    paths = sorted(p for p in args.folder.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not paths:
        raise CliCallError(f"no {', '.join(SUFFIXES)} files under {args.folder}")
    items = [_upload(args, path) for path in tqdm(paths, desc="uploading", unit="file")]
    settled = _wait_indexed(args, [item["id"] for item in items])
    failed = [item for item in settled if item["status"] == "error"]
    chunks = sum(item["chunks_count"] for item in settled)
    print(f"{len(settled) - len(failed)} of {len(settled)} files indexed, {chunks} chunks")
    for item in failed:
        print(f"  {item['key']}: {item['error']}", file=sys.stderr)


def _upload(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    key = path.relative_to(args.folder).as_posix()
    with path.open("rb") as stream:
        result: dict[str, Any] = call(
            args, "POST", f"{INSTANCES}/{args.name}/items", TIMEOUT_S, files={"file": (key, stream)}
        )
    return result


def _wait_indexed(args: argparse.Namespace, item_ids: list[str]) -> list[dict[str, Any]]:
    with tqdm(total=len(item_ids), desc="indexing", unit="file") as bar:
        while True:
            items = [call(args, "GET", f"{INSTANCES}/{args.name}/items/{i}", TIMEOUT_S) for i in item_ids]
            settled = sum(item["status"] in ("completed", "error") for item in items)
            bar.update(settled - bar.n)
            if settled == len(items):
                return items
            time.sleep(POLL_S)


def cmd_search(args: argparse.Namespace) -> int:
    def show() -> None:
        found = call(args, "POST", f"{INSTANCES}/{args.name}/search", TIMEOUT_S, json={"query": args.query})
        for number, chunk in enumerate(found["chunks"], start=1):
            print(f"[{number}] {chunk['item']['key']}  score {chunk['score']:.3f}")
            print(f"    {chunk['text'][:300]}")

    return exit_status(show)


def cmd_ask(args: argparse.Namespace) -> int:
    def show() -> None:
        body = {"messages": [{"role": "user", "content": args.question}]}
        answer = call(args, "POST", f"{INSTANCES}/{args.name}/chat/completions", TIMEOUT_S, json=body)
        print(answer["choices"][0]["message"]["content"])
        for number, chunk in enumerate(answer["chunks"], start=1):
            print(f"[{number}] {chunk['item']['key']}", file=sys.stderr)

    return exit_status(show)
