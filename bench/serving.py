"""Serving benchmark: Cirrus against llama-cpp-python's own server: concurrency, cold start, prefix cache.

Usage: .venv/bin/python -m bench.serving [--model @cf/...]... [--levels 1,4,8,16] [--quick] [--runs N]
                                         [--max-tokens N] [--threads N] [--wait-quiet SECONDS] [--llama-server]
                                         [--phases levels,cold,prefix]

Each server is started by the benchmark on 127.0.0.1 and measured while the others are stopped. Chat models are
sent chat messages on /v1/chat/completions; models without a chat template raw prompts on /v1/completions. With
--llama-server, llama.cpp's own server (bench/peers.py builds it once per machine) joins the throughput levels
and the cold start (spawned with the same flags, timed from its spawn to the cold request's first token).
"""

import argparse
import asyncio
import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import IO, Any, TypeVar, cast

import httpx
import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from bench.core import (
    COMPLETION_TEXT,
    QUIET_CORES,
    REQUEST_TIMEOUT_S,
    USER_MESSAGE,
    Config,
    Stream,
    cirrus_server,
    cpu_model,
    cpu_sample,
    instances,
    load_average,
    naive_cold,
    others_cores,
    process_table,
    render_prompt,
    resolve_config,
    unload,
    verdict,
    wait_for_quiet,
    warm_page_cache,
)
from bench.peers import (
    llama_server,
    llama_server_binary,
    llama_server_command,
    llama_server_launched,
    peer_command,
    peer_server,
)
from bench.peers import progress as progress  # bench/cluster.py imports it from here
from cirrus.catalog import DEFAULT_MODEL
from cirrus.runtime.prefix_index import common_prefix

T = TypeVar("T")
Prompt = str | list[dict[str, str]]

CIRRUS = "Cirrus"
PEER = "llama-cpp-python"
LLAMA_SERVER = "llama-server"  # llama.cpp's own C++ server, a second peer with --llama-server
SERVERS = (PEER, CIRRUS)
REPEATED, FRESH = "repeated prompt", "fresh prompt"  # Cirrus's two cold-start series
PHASES = ("levels", "cold", "prefix")
GEMMA = "@cf/google/gemma-3-270m"
DEFAULT_LEVELS = (1, 4, 8, 16)
QUICK_LEVELS = (1, 8)
WARM_UP_TOKENS = 8
COLD_TOKENS = 8
PREFIX_TOKENS = 16
SHARED_PREFIX_TOKENS = 1000
SPARE_SETTLE_S = 5.0
PHASE_ATTEMPTS = 3
WATCH_WINDOW_S = 2.0
ABORT_CORES = 0.5
ROOT = Path(__file__).resolve().parents[1]

TARGET_BATCH_LEVEL, TARGET_BATCH_RATIO, TARGET_BATCH_P99_S = 8, 2.5, 1.5
TARGET_SINGLE_RATIO, TARGET_SINGLE_TTFT_S = 0.95, 0.030
TARGET_COLD_RATIO, TARGET_PREFIX_RATIO = 0.5, 0.3
# Against llama-server (issue 16)
TARGET_COLD_TTFT_S, TARGET_LLAMA_COLD_RATIO = 0.100, 0.25
TARGET_LLAMA_DECODE_RATIO, TARGET_LLAMA_BATCH_RATIO, TARGET_LLAMA_BATCH_LEVELS = 0.98, 1.4, (8, 16)
COLD_POLL_S = 0.005  # llama-server's /health, while it starts: the delay this adds to its cold start is small

SYSTEM_PROMPT = (
    "You are a knowledgeable writer. Answer every request with a long, thorough and well-organised essay of "
    "several paragraphs."
)
RAW_HEADER = "The following pages come from a long, detailed encyclopedia written for curious readers.\n\n"
TOPICS = (
    "The printing press", "Roman aqueducts", "Coral reefs", "The steam engine", "Honeybees", "Glaciers",
    "The Silk Road", "Volcanoes", "Lighthouses", "The telescope", "Tea", "Windmills", "The Great Barrier Reef",
    "Penicillin", "Ancient Egyptian pyramids", "Monsoons", "The bicycle", "Paper making", "Tides",
    "The compass", "Rainforests", "The telegraph", "Chess", "Bridges", "Deserts", "Vaccines", "The violin",
    "Coffee", "Earthquakes", "The Moon landing", "Clocks", "Salt", "Railways", "Mushrooms", "Libraries",
    "Hot air balloons", "Photosynthesis", "The Olympic Games", "Canals", "Bread",
)  # fmt: skip
ANGLES = (
    "its history and how it changed everyday life",
    "how it works, explained step by step",
    "its causes, its consequences and what we can learn from it",
    "what scientists and historians have discovered about it",
    "its role in different cultures around the world",
)
QUESTIONS = (
    "Summarise the records above in a few paragraphs.",
    "Which topics appear most often in the records above? Explain.",
)
RAW_ENDINGS = ("\n\nSummary of the records above:", "\n\nThe topics that appear most often are")


# -- what is sent ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Api:
    model_id: str
    chat: bool

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.chat else "/v1/completions"

    def body(self, prompt: Prompt, max_tokens: int, server: str, stream: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_id, "max_tokens": max_tokens, "temperature": 0.0}
        body["messages" if self.chat else "prompt"] = prompt
        body["stream"] = stream
        if server in (CIRRUS, LLAMA_SERVER) and stream:
            body["stream_options"] = {"include_usage": True}
        if server == PEER:
            body["repeat_penalty"] = 1.0  # its default is 1.1; Cirrus's is 1.0
        return body


def request_prompt(index: int, chat: bool) -> Prompt:
    """The index-th distinct prompt: the same system prompt (or header), then a different request."""
    topic, angle = TOPICS[index % len(TOPICS)], ANGLES[(index // len(TOPICS)) % len(ANGLES)]
    if not chat:
        return f"{RAW_HEADER}## {topic}: {angle}\n\n{topic}"
    user = f"{topic}: write a long, detailed essay about {angle}."
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def cold_prompt(chat: bool) -> Prompt:
    """What core.render_prompt renders, so that the naive process evaluates the same tokens."""
    return [{"role": "user", "content": USER_MESSAGE}] if chat else COMPLETION_TEXT


def fresh_cold_prompt(chat: bool, tag: str) -> Prompt:
    """The cold request with a sentence never sent before ahead of the user's text: the chat template's own head
    (its default system prompt) is the same as every user's, what follows it is new to the prefix cache."""
    opening = f"{tag} is this request's number. "
    return [{"role": "user", "content": opening + USER_MESSAGE}] if chat else opening + COMPLETION_TEXT


def fresh_tags(runs: int, draw: random.Random) -> list[str]:
    """One number per run, each drawn anew: a part shared by the runs would be restored from the prefix cache
    that the previous runs' instances left on disk."""
    return [str(number) for number in draw.sample(range(10**5, 10**6), runs)]


# -- prompts that share a long prefix ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefixPairs:
    pairs: list[tuple[Prompt, Prompt]]
    shared_tokens: list[int]
    prompt_tokens: list[int]


def record_text(run: int) -> str:
    sentences = (
        f"Record {run}.{j}: {TOPICS[(j * 7 + run) % len(TOPICS)]} matters because of "
        f"{ANGLES[j % len(ANGLES)]}, as entry {j} of archive {run} explains."
        for j in range(200)
    )
    return " ".join(sentences)


def render(llm: llama_cpp.Llama, prompt: Prompt) -> list[int]:
    if isinstance(prompt, str):
        return list(llm.tokenize(prompt.encode(), add_bos=True, special=True))
    model, eos, bos = llm._model, llm.token_eos(), llm.token_bos()
    formatter = Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        eos_token=model.token_get_text(eos) if eos != -1 else "",
        bos_token=model.token_get_text(bos) if bos != -1 else "",
    )
    text = formatter(messages=cast(Any, prompt)).prompt
    return list(llm.tokenize(text.encode(), add_bos=True, special=True))


def pair_for(document: str, chat: bool) -> tuple[Prompt, Prompt]:
    if not chat:
        first, second = RAW_ENDINGS
        return document + first, document + second
    a, b = ([{"role": "system", "content": document}, {"role": "user", "content": q}] for q in QUESTIONS)
    return a, b


def shared_pair(llm: llama_cpp.Llama, run: int, chat: bool) -> tuple[tuple[Prompt, Prompt], int, int]:
    """Two prompts whose token sequences share about SHARED_PREFIX_TOKENS tokens, then differ."""
    tokens = llm.tokenize(record_text(run).encode(), add_bos=False)
    keep = SHARED_PREFIX_TOKENS
    for _ in range(3):
        pair = pair_for(llm.detokenize(tokens[:keep]).decode(errors="ignore"), chat)
        first, second = render(llm, pair[0]), render(llm, pair[1])
        shared = common_prefix(first, second)
        keep -= shared - SHARED_PREFIX_TOKENS
    return pair, shared, len(first)


@dataclass(frozen=True)
class Prepared:
    """What needs the model's tokenizer, prepared before any server runs."""

    api: Api
    naive_text: str
    pairs: PrefixPairs


def prepare(config: Config, runs: int) -> Prepared:
    llm = llama_cpp.Llama(model_path=str(config.path), vocab_only=True, verbose=False)
    try:
        chat = bool(llm.metadata.get("tokenizer.chat_template"))
        made = [shared_pair(llm, run, chat) for run in range(runs)]
        naive_text = render_prompt(llm)
    finally:
        llm.close()
    pairs = PrefixPairs([m[0] for m in made], [m[1] for m in made], [m[2] for m in made])
    return Prepared(Api(config.spec.id, chat), naive_text, pairs)


# -- one streamed request ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    stream: Stream
    started: float
    ended: float
    deltas: int
    finish_reason: str
    cached_tokens: int | None


@dataclass(frozen=True)
class Check:
    """A non-streamed greedy answer, to compare the two servers' prompt tokens and text."""

    prompt_tokens: int
    completion_tokens: int
    text: str


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[float, dict[str, Any]]]:
    async for line in response.aiter_lines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            return
        event: dict[str, Any] = json.loads(line[len("data: ") :])
        if "error" in event:
            raise RuntimeError(f"server error: {event['error']}")
        yield time.perf_counter(), event


def choice_of(event: dict[str, Any]) -> tuple[str, str | None]:
    choices = event.get("choices") or []
    if not choices:
        return "", None
    choice = choices[0]
    text = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
    return str(text), choice.get("finish_reason")


def reply_of(started: float, stamps: list[float], finish: str, usage: dict[str, Any]) -> Reply:
    tokens = int(usage.get("completion_tokens", len(stamps)))
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    stream = Stream.of(started, stamps, tokens, int(usage.get("prompt_tokens", 0)))
    return Reply(stream, started, time.perf_counter(), len(stamps), finish, cached)


async def stream_one(
    client: httpx.AsyncClient, api: Api, server: str, prompt: Prompt, max_tokens: int
) -> Reply:
    body = api.body(prompt, max_tokens, server)
    stamps: list[float] = []
    finish, usage = "", dict[str, Any]()
    started = time.perf_counter()
    async with client.stream("POST", api.path, json=body) as response:
        response.raise_for_status()
        async for stamp, event in sse_events(response):
            text, reason = choice_of(event)
            if text:
                stamps.append(stamp)
            finish, usage = reason or finish, event.get("usage") or usage
    return reply_of(started, stamps, finish, usage)


async def complete(
    client: httpx.AsyncClient, api: Api, server: str, prompt: Prompt, max_tokens: int
) -> Check:
    response = await client.post(api.path, json=api.body(prompt, max_tokens, server, stream=False))
    response.raise_for_status()
    answer = response.json()
    choice = answer["choices"][0]
    text = choice.get("text") if "text" in choice else choice["message"]["content"]
    usage = answer["usage"]
    return Check(int(usage["prompt_tokens"]), int(usage["completion_tokens"]), str(text))


def async_client(base_url: str, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections + 4, max_keepalive_connections=connections + 4)
    return httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT_S, limits=limits)


async def watched(work: Awaitable[T], noisy: threading.Event) -> T:
    """Await work, but cancel it (closing its connections) and raise Noisy as soon as noisy is set."""
    task = asyncio.ensure_future(work)
    while not task.done():
        if noisy.is_set():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise Noisy
        await asyncio.wait({task}, timeout=0.25)
    return task.result()


def check_quiet(noisy: threading.Event) -> None:
    if noisy.is_set():
        raise Noisy


async def sequential(
    base_url: str, api: Api, server: str, prompts: Sequence[Prompt], tokens: int
) -> list[Reply]:
    async with async_client(base_url, 1) as client:
        return [await stream_one(client, api, server, prompt, tokens) for prompt in prompts]


# -- servers -----------------------------------------------------------------------------------------------------


def cirrus_command(threads: int) -> str:
    return (
        f"CIRRUS_THREADS={threads} CIRRUS_REQUEST_TIMEOUT_S={REQUEST_TIMEOUT_S:g} "
        f"{sys.executable} -m cirrus.cli serve --host 127.0.0.1 --port PORT"
    )


@contextlib.contextmanager
def server_url(server: str, config: Config, log: IO[str]) -> Iterator[str]:
    if server == PEER:
        with peer_server(config, log) as url:
            yield url
        return
    if server == LLAMA_SERVER:
        with llama_server(config, log) as url:
            yield url
        return
    with cirrus_server(config.threads, log) as client:
        yield str(client.base_url).rstrip("/")


# -- phases, each measured after waiting for a quiet machine -----------------------------------------------------


def descendants(table: dict[int, tuple[int, float]]) -> set[int]:
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = {pid for pid, (ppid, _) in table.items() if ppid == parent} - tree
        tree |= children
        frontier.extend(children)
    return tree


def busiest_others(before: dict[int, tuple[int, float]]) -> str:
    """The processes outside this benchmark that used the most CPU since `before` was taken."""
    after = process_table()
    ours = descendants(after)
    used = {pid: cpu - before.get(pid, (0, 0.0))[1] for pid, (_, cpu) in after.items() if pid not in ours}
    top = sorted(used, key=lambda pid: -used[pid])[:3]
    return ", ".join(f"{process_name(pid)} ({pid}) {used[pid]:.1f} CPU-s" for pid in top)


def process_name(pid: int) -> str:
    try:
        return " ".join(
            Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace("\0", " ").split()
        )[:60]
    except OSError:
        return "?"


class Noisy(Exception):
    """Other processes took CPU while a phase was measured: its figures would be meaningless."""


class Watch:
    """Sets `noisy` once other processes keep more than ABORT_CORES busy over one WATCH_WINDOW_S window, so that
    a phase stops early instead of crawling on while llama.cpp's threads fight for the cores."""

    def __init__(self, enabled: bool) -> None:
        self.noisy = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="contention-watch", daemon=True)
        self._enabled = enabled

    def __enter__(self) -> "Watch":
        if self._enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._enabled:
            self._thread.join()

    def _watch(self) -> None:
        start = cpu_sample()
        while not self._stop.wait(WATCH_WINDOW_S):
            if others_cores(start) > ABORT_CORES:
                self.noisy.set()
            start = cpu_sample()


@dataclass
class Phases:
    wait_quiet_s: float
    busy: dict[str, list[float]] = field(default_factory=dict)

    def run(self, name: str, measure: Callable[[threading.Event], T]) -> T:
        """Measure after waiting for a quiet machine, and again (at most PHASE_ATTEMPTS times) if other processes
        took CPU meanwhile; the last attempt is kept whatever happens, and its contention is reported."""
        for attempt in range(1, PHASE_ATTEMPTS + 1):
            outcome = self._attempt(name, measure, last=attempt == PHASE_ATTEMPTS)
            if outcome is not None:
                result, cores = outcome
                self.busy.setdefault(name, []).append(cores)
                return result
        raise AssertionError("the last attempt always returns")

    def _attempt(
        self, name: str, measure: Callable[[threading.Event], T], last: bool
    ) -> tuple[T, float] | None:
        progress(f"{name}: waiting for a quiet machine ({wait_for_quiet(self.wait_quiet_s)})")
        start, table = cpu_sample(), process_table()
        with Watch(enabled=not last) as watch:
            try:
                result = measure(watch.noisy)
            except Noisy:
                progress(f"{name}: stopped early, other processes are busy: {busiest_others(table)}")
                return None
        cores = others_cores(start)
        if cores >= QUIET_CORES and not last:
            progress(f"{name}: others kept {cores:.2f} cores busy: {busiest_others(table)}")
            return None
        return result, cores


# -- 1. throughput at each concurrency ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    server: str
    concurrency: int
    wall_s: float
    replies: list[Reply]
    check: Check

    @property
    def tokens(self) -> int:
        return sum(r.stream.completion_tokens for r in self.replies)

    @property
    def aggregate_tps(self) -> float:
        return self.tokens / self.wall_s

    def plus(self, other: "Level") -> "Level":
        """Two rounds of the same level as one: their requests and their measured time added up."""
        replies = self.replies + other.replies
        return Level(self.server, self.concurrency, self.wall_s + other.wall_s, replies, self.check)

    def ttft_s(self, quantile: int) -> float:
        values = sorted(r.stream.ttft_s for r in self.replies)
        return statistics.quantiles(values, n=100, method="inclusive")[quantile - 1]

    @property
    def decode_tps(self) -> float:
        return statistics.median(r.stream.decode_tps for r in self.replies)

    @property
    def tail_s(self) -> float:
        """From the last token to the end of the response ([DONE], connection released)."""
        return statistics.median(r.ended - r.stream.last_s for r in self.replies)


async def closed_loop(
    client: httpx.AsyncClient, api: Api, server: str, prompts: list[Prompt], concurrency: int, tokens: int
) -> list[Reply]:
    """Keep `concurrency` requests in flight until every prompt is answered."""
    pending, replies = iter(prompts), []

    async def caller() -> None:
        for prompt in pending:
            replies.append(await stream_one(client, api, server, prompt, tokens))

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return replies


async def level_run(url: str, api: Api, server: str, concurrency: int, requests: int, tokens: int) -> Level:
    """A check answer and a warm-up at this concurrency (distinct prompts), then the measured requests."""
    first = concurrency + 1
    async with async_client(url, concurrency) as client:
        check = await complete(client, api, server, request_prompt(0, api.chat), tokens)
        warm_up = [request_prompt(i, api.chat) for i in range(1, first)]
        await closed_loop(client, api, server, warm_up, concurrency, WARM_UP_TOKENS)
        if server == CIRRUS:  # a cold start above takes the spare worker; its replacement starts 2 s later
            await asyncio.sleep(SPARE_SETTLE_S)
        prompts = [request_prompt(i, api.chat) for i in range(first, first + requests)]
        started = time.perf_counter()
        replies = await closed_loop(client, api, server, prompts, concurrency, tokens)
    wall_s = max(r.stream.last_s for r in replies) - started
    return Level(server, concurrency, wall_s, replies, check)


def measure_level(
    config: Config,
    api: Api,
    server: str,
    concurrency: int,
    requests: int,
    log: IO[str],
    noisy: threading.Event,
) -> Level:
    with server_url(server, config, log) as url:
        work = level_run(url, api, server, concurrency, requests, config.max_tokens)
        return asyncio.run(watched(work, noisy))


def throughput(config: Config, api: Api, plan: "Plan", phases: Phases, log: IO[str]) -> list[Level]:
    """Each level in rounds, the servers' order reversed every other round (peer, Cirrus, Cirrus, peer)."""
    levels = []
    for concurrency in plan.levels:
        requests, measured = plan.requests(concurrency), dict[str, Level]()
        for round_ in range(plan.rounds):
            for server in plan.servers if round_ % 2 == 0 else plan.servers[::-1]:
                measure = partial(measure_level, config, api, server, concurrency, requests, log)
                level = phases.run(f"c={concurrency} {server}", measure)
                measured[server] = measured[server].plus(level) if server in measured else level
        levels += [measured[server] for server in plan.servers]
    return levels


# -- 2. cold start and 3. prefix cache (Cirrus), with their baselines ---------------------------------------------


@dataclass(frozen=True)
class ProcessStart:
    """A server process spawned for one cold request: from the spawn to its readiness and to its first streamed
    token, and the reply."""

    ready_s: float
    first_token_s: float
    reply: Reply


@dataclass
class Cold:
    cirrus: list[Reply] = field(default_factory=list)  # the repeated prompt, the same cold request each run
    naive_s: list[float] = field(default_factory=list)
    phases: list[dict[str, float]] = field(default_factory=list)  # Cirrus's process, load, first token (s)
    llama_server: list[ProcessStart] = field(default_factory=list)
    fresh: list[Reply] = field(default_factory=list)  # a user message never sent before, each run
    fresh_phases: list[dict[str, float]] = field(default_factory=list)

    def series(self) -> list[tuple[str, list[Reply]]]:
        """Cirrus's cold requests by prompt, each named; a series not measured is left out."""
        named = [(REPEATED, self.cirrus), (FRESH, self.fresh)]
        return [(name, replies) for name, replies in named if replies]


@dataclass
class Prefix:
    pairs: PrefixPairs
    cirrus: list[tuple[Reply, Reply]] = field(default_factory=list)
    peer: list[tuple[Reply, Reply]] = field(default_factory=list)


def unloaded_and_settled(client: httpx.Client, model_id: str) -> None:
    """No instance left, and time for the spare worker process to be started again."""
    unload(client, model_id)
    time.sleep(SPARE_SETTLE_S)


def cold_start(
    config: Config, api: Api, naive_text: str, with_llama_server: bool, log: IO[str], noisy: threading.Event
) -> Cold:
    """Each run: llama-server's process start (if measured) while Cirrus waits with a spare ready, then Cirrus's
    cold request with the repeated prompt, then the naive process (before Cirrus starts a new spare,
    SPARE_SETTLE_S later); then Cirrus's cold request with a fresh prompt."""
    cold, prompt = Cold(), cold_prompt(api.chat)
    fresh = [fresh_cold_prompt(api.chat, tag) for tag in fresh_tags(config.runs, random.Random())]
    with cirrus_server(config.threads, log) as client:
        for run in range(config.runs):
            unloaded_and_settled(client, config.spec.id)
            check_quiet(noisy)
            if with_llama_server:
                cold.llama_server.append(llama_server_cold(config, api, log))
                check_quiet(noisy)
            reply, phases = cirrus_cold_request(client, config, api, prompt)
            cold.cirrus.append(reply)
            cold.phases.append(phases)
            cold.naive_s.append(naive_cold(config, naive_text))
            unloaded_and_settled(client, config.spec.id)
            check_quiet(noisy)
            reply, phases = cirrus_cold_request(client, config, api, fresh[run])
            cold.fresh.append(reply)
            cold.fresh_phases.append(phases)
    return cold


def cirrus_cold_request(
    client: httpx.Client, config: Config, api: Api, prompt: Prompt
) -> tuple[Reply, dict[str, float]]:
    """The model unloaded: one streamed request (page cache warm), and the phases its instance reports."""
    warm_page_cache(config.path)
    url = str(client.base_url).rstrip("/")
    [reply] = asyncio.run(sequential(url, api, CIRRUS, [prompt], COLD_TOKENS))
    return reply, cold_start_phases(client, config.spec.id)


def llama_server_cold(config: Config, api: Api, log: IO[str]) -> ProcessStart:
    """llama-server spawned with its throughput flags (page cache warm), ready, then sent the cold request."""
    warm_page_cache(config.path)
    with llama_server_launched(config, log, COLD_POLL_S) as (url, spawned_at):
        ready_s = time.perf_counter() - spawned_at
        [reply] = asyncio.run(sequential(url, api, LLAMA_SERVER, [cold_prompt(api.chat)], COLD_TOKENS))
    return ProcessStart(ready_s, reply.stream.first_s - spawned_at, reply)


def cold_start_phases(client: httpx.Client, model_id: str) -> dict[str, float]:
    """The cold-started instance's own account: getting a process, loading the model, reaching a first token."""
    [instance] = [i for i in instances(client) if i["model"] == model_id]
    phases: dict[str, float] = instance["cold_start_phases"]
    return phases


def prefix_cirrus(
    config: Config, api: Api, pairs: PrefixPairs, log: IO[str], noisy: threading.Event
) -> list[tuple[Reply, Reply]]:
    """Each pair on a freshly loaded instance (unload, then load): nothing of the first prompt is cached."""
    measured = []
    with cirrus_server(config.threads, log) as client:
        url = str(client.base_url).rstrip("/")
        for first, second in pairs.pairs:
            unload(client, config.spec.id)
            client.post(f"/admin/models/{config.spec.id}/load").raise_for_status()
            time.sleep(SPARE_SETTLE_S)
            check_quiet(noisy)
            a, b = asyncio.run(sequential(url, api, CIRRUS, [first, second], PREFIX_TOKENS))
            measured.append((a, b))
    return measured


def prefix_peer(
    config: Config, api: Api, pairs: PrefixPairs, log: IO[str], noisy: threading.Event
) -> list[tuple[Reply, Reply]]:
    """The peer keeps only its last prompt's cache: an unrelated request first, so the first pair member is new."""
    measured = []
    with peer_server(config, log) as url:
        for first, second in pairs.pairs:
            check_quiet(noisy)
            _, a, b = asyncio.run(
                sequential(url, api, PEER, [cold_prompt(api.chat), first, second], PREFIX_TOKENS)
            )
            measured.append((a, b))
    return measured


# -- the whole run for one model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    levels: tuple[int, ...]
    quick: bool
    runs: int
    threads: int
    max_tokens: int
    servers: tuple[str, ...] = SERVERS
    phases: tuple[str, ...] = PHASES

    def requests(self, concurrency: int) -> int:
        """Requests per server per round."""
        return max(concurrency, 4) if self.quick else max(2 * concurrency, 16)

    @property
    def rounds(self) -> int:
        return 1 if self.quick else 2


@dataclass
class ModelRun:
    config: Config
    api: Api
    levels: list[Level]
    cold: Cold | None
    prefix: Prefix | None
    busy: dict[str, list[float]]
    load_before: str
    load_after: str = ""


def model_config(model: str, plan: Plan) -> Config:
    namespace = argparse.Namespace(
        model=model, threads=plan.threads, max_tokens=plan.max_tokens, runs=plan.runs
    )
    return resolve_config(namespace)


def measure_model(model: str, plan: Plan, runner: Phases, log: IO[str]) -> ModelRun:
    config = model_config(model, plan)
    warm_page_cache(config.path)
    prepared = prepare(config, plan.runs)
    api = prepared.api
    load_before = load_average()
    levels = throughput(config, api, plan, runner, log) if "levels" in plan.phases else []
    cold = measure_cold(config, prepared, plan, runner, log) if "cold" in plan.phases else None
    prefix = measure_prefix(config, prepared, runner, log) if "prefix" in plan.phases else None
    return ModelRun(config, api, levels, cold, prefix, dict(runner.busy), load_before, load_average())


def measure_cold(config: Config, prepared: Prepared, plan: Plan, runner: Phases, log: IO[str]) -> Cold:
    with_llama_server = LLAMA_SERVER in plan.servers
    measure = partial(cold_start, config, prepared.api, prepared.naive_text, with_llama_server, log)
    return runner.run("cold start", measure)


def measure_prefix(config: Config, prepared: Prepared, runner: Phases, log: IO[str]) -> Prefix:
    api, pairs = prepared.api, prepared.pairs
    prefix = Prefix(pairs)
    prefix.cirrus = runner.run("prefix Cirrus", partial(prefix_cirrus, config, api, pairs, log))
    prefix.peer = runner.run("prefix peer", partial(prefix_peer, config, api, pairs, log))
    return prefix


# -- report ------------------------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def spread(values: Sequence[float], scale: float = 1000.0) -> str:
    return f"{statistics.median(values) * scale:.0f} [{min(values) * scale:.0f}-{max(values) * scale:.0f}]"


def counts(values: Sequence[int | str]) -> str:
    seen = sorted({str(v) for v in values})
    return "/".join(f"{v} x{sum(1 for x in values if str(x) == v)}" for v in seen)


def level_row(level: Level) -> str:
    return (
        f"{level.concurrency:>4}  {level.server:17} {len(level.replies):>4} {level.tokens:>6} "
        f"{level.aggregate_tps:>9.1f} {ms(level.ttft_s(50)):>8} {ms(level.ttft_s(99)):>8} "
        f"{level.decode_tps:>8.1f} {level.tail_s * 1000:>6.1f}   "
        f"{counts([r.stream.completion_tokens for r in level.replies])}"
    )


def level_table(levels: list[Level]) -> list[str]:
    title = "   c  server            reqs tokens agg tok/s TTFT p50 TTFT p99 decode/req   tail  tokens per request"
    units = "                                      (tok/s)     (ms)     (ms) (tok/s p50) (ms p50)"
    return [title, units, *(level_row(level) for level in levels)]


def check_line(levels: list[Level]) -> str:
    first = {level.server: level.check for level in levels if level.concurrency == levels[0].concurrency}
    peer, cirrus = first[PEER], first[CIRRUS]
    same = "identical" if peer.text == cirrus.text else "different"
    line = (
        f"check (non-streamed, greedy, same prompt): prompt tokens {PEER} {peer.prompt_tokens}, {CIRRUS} "
        f"{cirrus.prompt_tokens}; completion tokens {peer.completion_tokens}/{cirrus.completion_tokens}; "
        f"texts {same}"
    )
    if LLAMA_SERVER not in first:
        return line
    other = first[LLAMA_SERVER]
    same = "identical" if other.text == cirrus.text else "different"
    return (
        f"{line}; {LLAMA_SERVER}: prompt tokens {other.prompt_tokens}, completion tokens "
        f"{other.completion_tokens}, text {same} to {CIRRUS}'s"
    )


def finish_line(levels: list[Level]) -> str:
    parts = []
    for server in dict.fromkeys(level.server for level in levels):
        replies = [r for level in levels if level.server == server for r in level.replies]
        reasons = counts([r.finish_reason for r in replies])
        parts.append(f"{server}: {reasons} (content deltas {counts([r.deltas for r in replies])})")
    return "finish reasons: " + "; ".join(parts)


def cold_lines(cold: Cold) -> list[str]:
    return [
        f"cold start, median [min-max] of {len(cold.naive_s)} runs, ms (Cirrus: model unloaded, spare worker "
        "ready; its prefix cache, kept on disk by the previous instance, restores what matches):",
        *(sample_line(f"Cirrus TTFT, {name}", ttfts(replies)) for name, replies in cold.series()),
        sample_line("naive process: spawn to first token", cold.naive_s),
        *llama_server_spawn_lines(cold.llama_server),
        *cirrus_cold_details(cold),
        *llama_server_detail_lines(cold.llama_server),
    ]


def cirrus_cold_details(cold: Cold) -> list[str]:
    """What each series sent, the prompt and cached tokens Cirrus reported, and its instances' phases."""
    others = f"{LLAMA_SERVER} and the naive process" if cold.llama_server else "the naive process"
    return [
        f"  {REPEATED}: the same cold request each run (the server starts with an empty state folder: nothing "
        f"to restore in the first run); {FRESH}: its user message opened by a sentence never sent before (the "
        f"chat template's head unchanged); {others}: the {REPEATED}",
        "  prompt tokens (Cirrus usage): "
        + "; ".join(
            f"{name} {counts([r.stream.prompt_tokens for r in replies])}" for name, replies in cold.series()
        ),
        "  cached_tokens of each cold request (Cirrus usage): "
        + "; ".join(f"{name} {cached_samples(replies)}" for name, replies in cold.series()),
        f"  Cirrus phases, {REPEATED}: {phase_spreads(cold.phases)}",
        *([f"  Cirrus phases, {FRESH}: {phase_spreads(cold.fresh_phases)}"] if cold.fresh_phases else []),
    ]


def ttfts(replies: list[Reply]) -> list[float]:
    return [r.stream.ttft_s for r in replies]


def sample_line(label: str, seconds: Sequence[float]) -> str:
    """A series' median [min-max] and its samples, in ms, in columns that line up with the other series'."""
    extremes = f"[{ms(min(seconds))}-{ms(max(seconds))}]"
    samples = " ".join(ms(v) for v in seconds)
    return f"  {label:42} {ms(statistics.median(seconds)):>5} {extremes:13} samples {samples}"


def cached_samples(replies: list[Reply]) -> str:
    """Each request's cached_tokens in order ("-" where the server reported none)."""
    return " ".join("-" if r.cached_tokens is None else str(r.cached_tokens) for r in replies)


def llama_server_spawn_lines(starts: list[ProcessStart]) -> list[str]:
    if not starts:
        return []
    return [sample_line(f"{LLAMA_SERVER} process: spawn to first token", [s.first_token_s for s in starts])]


def llama_server_detail_lines(starts: list[ProcessStart]) -> list[str]:
    if not starts:
        return []
    ready = [start.ready_s for start in starts]
    request = [start.first_token_s - start.ready_s for start in starts]
    return [
        f"  prompt tokens ({LLAMA_SERVER} usage): {counts([s.reply.stream.prompt_tokens for s in starts])}",
        f"  {LLAMA_SERVER} phases: ready (/health 200) {spread(ready)}, first token after ready {spread(request)}",
    ]


def phase_spreads(phases: list[dict[str, float]]) -> str:
    """process (a spare taken), load (the model in it), first token (from the request's admission), ms."""
    names = {"process_s": "process", "load_s": "load", "first_token_s": "first token"}
    found = {label: [run[key] for run in phases if key in run] for key, label in names.items()}
    return (
        ", ".join(f"{label} {spread(values)}" for label, values in found.items() if values) or "none reported"
    )


def prefix_line(name: str, pairs: list[tuple[Reply, Reply]]) -> str:
    first, second = [a.stream.ttft_s for a, _ in pairs], [b.stream.ttft_s for _, b in pairs]
    cached = [b.cached_tokens for _, b in pairs]
    cached_text = (
        f", second's cached_tokens {counts([c for c in cached if c is not None])}" if any(cached) else ""
    )
    return f"  {name:17} first {spread(first)}  second {spread(second)}{cached_text}"


def prefix_lines(prefix: Prefix) -> list[str]:
    pairs = prefix.pairs
    return [
        f"shared prefix: {counts(pairs.shared_tokens)} shared tokens of {counts(pairs.prompt_tokens)}-token "
        f"prompts, TTFT median [min-max] of {len(pairs.pairs)} runs, ms:",
        prefix_line(CIRRUS, prefix.cirrus),
        prefix_line(PEER, prefix.peer),
    ]


def find(levels: list[Level], server: str, concurrency: int) -> Level | None:
    return next((lv for lv in levels if lv.server == server and lv.concurrency == concurrency), None)


def batch_targets(levels: list[Level]) -> list[str]:
    cirrus, peer = find(levels, CIRRUS, TARGET_BATCH_LEVEL), find(levels, PEER, TARGET_BATCH_LEVEL)
    if cirrus is None or peer is None:
        return [f"concurrency {TARGET_BATCH_LEVEL}: not measured (see --levels)"]
    ratio, p99 = cirrus.aggregate_tps / peer.aggregate_tps, cirrus.ttft_s(99)
    return [
        f"c=8 aggregate tok/s >= {TARGET_BATCH_RATIO}x peer:       {ratio:.2f}x  "
        f"{verdict(ratio >= TARGET_BATCH_RATIO)}",
        f"c=8 Cirrus TTFT p99 < {TARGET_BATCH_P99_S} s:             {p99:.3f} s  {verdict(p99 < TARGET_BATCH_P99_S)}",
    ]


def single_targets(levels: list[Level]) -> list[str]:
    cirrus, peer = find(levels, CIRRUS, 1), find(levels, PEER, 1)
    if cirrus is None or peer is None:
        return ["concurrency 1: not measured (see --levels)"]
    ratio, gap = cirrus.aggregate_tps / peer.aggregate_tps, cirrus.ttft_s(50) - peer.ttft_s(50)
    return [
        f"c=1 aggregate tok/s >= {TARGET_SINGLE_RATIO}x peer:      {ratio:.3f}x  "
        f"{verdict(ratio >= TARGET_SINGLE_RATIO)}",
        f"c=1 TTFT p50 at most +30 ms vs peer:      {gap * 1000:+.1f} ms  {verdict(gap <= TARGET_SINGLE_TTFT_S)}",
    ]


def cold_targets(cold: Cold) -> list[str]:
    ratio = statistics.median(ttfts(cold.cirrus)) / statistics.median(cold.naive_s)
    return [
        f"cold-start TTFT <= {TARGET_COLD_RATIO}x naive process, {REPEATED}: {ratio:.3f}x  "
        f"{verdict(ratio <= TARGET_COLD_RATIO)}"
    ]


def prefix_targets(prefix: Prefix) -> list[str]:
    first = statistics.median(a.stream.ttft_s for a, _ in prefix.cirrus)
    second = statistics.median(b.stream.ttft_s for _, b in prefix.cirrus)
    return [
        f"shared-prefix TTFT <= {TARGET_PREFIX_RATIO}x first request: {second / first:.3f}x  "
        f"{verdict(second / first <= TARGET_PREFIX_RATIO)}",
    ]


def llama_server_cold_targets(cold: Cold) -> list[str]:
    if not cold.llama_server:
        return []
    process_s = statistics.median(start.first_token_s for start in cold.llama_server)
    return [line for name, replies in cold.series() for line in cold_series_targets(name, replies, process_s)]


def cold_series_targets(name: str, replies: list[Reply], llama_server_s: float) -> list[str]:
    """Issue 16's cold-start targets for one of Cirrus's series, against llama-server's process start."""
    ttft = statistics.median(ttfts(replies))
    ratio = ttft / llama_server_s
    return [
        f"cold-start TTFT <= {ms(TARGET_COLD_TTFT_S)} ms, {name} (median of {len(replies)}): "
        f"{ttft * 1000:.1f} ms  {verdict(ttft <= TARGET_COLD_TTFT_S)}",
        f"cold-start TTFT <= {TARGET_LLAMA_COLD_RATIO}x {LLAMA_SERVER} process start, {name}: {ratio:.3f}x  "
        f"{verdict(ratio <= TARGET_LLAMA_COLD_RATIO)}",
    ]


def llama_server_level_targets(levels: list[Level]) -> list[str]:
    if not any(level.server == LLAMA_SERVER for level in levels):
        return []
    return [
        *llama_server_single_targets(levels),
        *(llama_server_batch_target(levels, c) for c in TARGET_LLAMA_BATCH_LEVELS),
    ]


def llama_server_single_targets(levels: list[Level]) -> list[str]:
    cirrus, other = find(levels, CIRRUS, 1), find(levels, LLAMA_SERVER, 1)
    if cirrus is None or other is None:
        return ["concurrency 1: not measured (see --levels)"]
    ttft, other_ttft = cirrus.ttft_s(50), other.ttft_s(50)
    decode = cirrus.decode_tps / other.decode_tps
    return [
        f"c=1 TTFT p50 <= {LLAMA_SERVER}'s:             {ttft * 1000:.1f} vs {other_ttft * 1000:.1f} ms  "
        f"{verdict(ttft <= other_ttft)}",
        f"c=1 decode >= {TARGET_LLAMA_DECODE_RATIO}x {LLAMA_SERVER}'s:       {decode:.3f}x  "
        f"{verdict(decode >= TARGET_LLAMA_DECODE_RATIO)}",
    ]


def llama_server_batch_target(levels: list[Level], concurrency: int) -> str:
    cirrus, other = find(levels, CIRRUS, concurrency), find(levels, LLAMA_SERVER, concurrency)
    if cirrus is None or other is None:
        return f"concurrency {concurrency}: not measured (see --levels)"
    ratio = cirrus.aggregate_tps / other.aggregate_tps
    return (
        f"c={concurrency} aggregate >= {TARGET_LLAMA_BATCH_RATIO}x {LLAMA_SERVER}'s:  {ratio:.2f}x  "
        f"{verdict(ratio >= TARGET_LLAMA_BATCH_RATIO)}"
    )


def busy_line(busy: dict[str, list[float]]) -> str:
    phases = ", ".join(f"{name} {'/'.join(f'{c:.2f}' for c in cores)}" for name, cores in busy.items())
    return f"cores kept busy by other processes during each phase (of {os.cpu_count()}): {phases}"


def peer_commands(run: ModelRun) -> list[str]:
    lines = [f"peer command: {' '.join(peer_command(run.config, 'PORT'))}"]
    uses = [
        *(["throughput"] if any(level.server == LLAMA_SERVER for level in run.levels) else []),
        *(["cold start"] if run.cold is not None and run.cold.llama_server else []),
    ]
    if uses:
        command = llama_server_command(llama_server_binary(), run.config, "PORT")
        lines.append(f"{LLAMA_SERVER} command ({' and '.join(uses)}): {' '.join(command)}")
    return lines


def model_report(run: ModelRun) -> list[str]:
    config = run.config
    return [
        f"== {config.spec.id} ({config.path.name}), {run.api.path}, n_ctx {config.spec.context_window}, "
        f"{config.threads} threads, greedy, max_tokens {config.max_tokens}",
        *peer_commands(run),
        f"load average before: {run.load_before}; after: {run.load_after}",
        busy_line(run.busy),
        *(levels_section(run.levels) if run.levels else []),
        "",
        *(cold_lines(run.cold) if run.cold is not None else []),
        *(prefix_lines(run.prefix) if run.prefix is not None else []),
        "",
        "targets:",
        *targets(run.levels, run.cold, run.prefix),
        "",
    ]


def levels_section(levels: list[Level]) -> list[str]:
    return [check_line(levels), finish_line(levels), "", *level_table(levels)]


def targets(levels: list[Level], cold: Cold | None, prefix: Prefix | None) -> list[str]:
    """The verdicts on what was measured: against llama-cpp-python's server, then against llama-server."""
    lines = [*single_targets(levels), *batch_targets(levels)] if levels else []
    lines += cold_targets(cold) if cold is not None else []
    lines += prefix_targets(prefix) if prefix is not None else []
    lines += llama_server_level_targets(levels)
    return lines + (llama_server_cold_targets(cold) if cold is not None else [])


def source_digest(src: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(src.rglob("*")):
        if path.suffix in (".py", ".toml"):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def frozen_source() -> Iterator[Path]:
    """Serve Cirrus (server and workers) from a copy of src/ taken now, so that edits made to the working tree
    while the benchmark runs cannot mix code versions within one run."""
    with tempfile.TemporaryDirectory(prefix="cirrus-src-") as folder:
        copy = Path(folder) / "src"
        shutil.copytree(ROOT / "src", copy, ignore=shutil.ignore_patterns("__pycache__"))
        previous = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(copy), previous]))
        try:
            yield copy
        finally:
            if previous is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = previous


def git_head() -> str:
    try:
        command = ["git", "-C", str(ROOT), "describe", "--always", "--dirty"]
        return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def header(plan: Plan, digest: str) -> list[str]:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    levels = ", ".join(f"c={c}: {plan.rounds}x{plan.requests(c)} requests" for c in plan.levels)
    return [
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; git {git_head()}; Cirrus served from a copy of src/ "
        f"taken at the start, digest {digest}",
        f"machine: {cpu_model()}, {os.cpu_count()} cores, {memory:.0f} GiB, Linux {platform.release()}",
        f"versions: Python {platform.python_version()}, llama-cpp-python {llama_cpp.__version__}, "
        f"cirrus {importlib.metadata.version('cirrus')}, httpx {httpx.__version__}",
        f"settings: levels {levels}; {plan.runs} cold-start and prefix runs; greedy (temperature 0, peer "
        f"repeat_penalty 1.0), max_tokens {plan.max_tokens}, streamed; warm-up before each level: one "
        f"non-streamed check + c requests of {WARM_UP_TOKENS} tokens; cold requests {COLD_TOKENS} tokens, "
        f"prefix requests {PREFIX_TOKENS} tokens",
        f"Cirrus command: {cirrus_command(plan.threads)}",
        "each server started fresh for each round of a level (rounds in the order peer, Cirrus, Cirrus, peer) "
        "and measured while the other is stopped; closed loop of c callers; TTFT from sending the request to the "
        "first non-empty content delta; aggregate = completion tokens / (first send to last token), summed over "
        "rounds; decode/req = (tokens - 1) / (last token - first token); tail = last token to end of response; "
        "tokens from usage (Cirrus) or counted content deltas (peer, which sends no usage when streaming)",
        *plan_notes(plan),
        "",
    ]


def plan_notes(plan: Plan) -> list[str]:
    notes = [] if plan.phases == PHASES else [f"phases measured: {', '.join(plan.phases)} (--phases)"]
    if LLAMA_SERVER in plan.servers and "cold" in plan.phases:
        notes.append(
            f"{LLAMA_SERVER} cold start: its process spawned (page cache warm) with its throughput flags, /health "
            f"polled every {COLD_POLL_S * 1000:g} ms, then the cold request; from the spawn to its first token"
        )
    return notes


def parse_phases(text: str) -> tuple[str, ...]:
    chosen = {part.strip() for part in text.split(",") if part.strip()}
    if not chosen or chosen - set(PHASES):
        raise argparse.ArgumentTypeError(f"phases are comma-separated names among {','.join(PHASES)}")
    return tuple(phase for phase in PHASES if phase in chosen)


def parse_levels(text: str) -> tuple[int, ...]:
    levels = tuple(int(part) for part in text.split(",") if part.strip())
    if not levels or min(levels) < 1 or max(levels) > 64:
        raise argparse.ArgumentTypeError("levels are comma-separated integers from 1 to 64")
    return levels


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", action="append", help=f"catalog model id (repeatable; default both: "
                        f"{DEFAULT_MODEL} and {GEMMA})")  # fmt: skip
    parser.add_argument("--levels", type=parse_levels, help="concurrency levels, e.g. 1,4,8,16")
    parser.add_argument("--quick", action="store_true", help="levels 1,8, few requests, 2 runs")
    parser.add_argument("--llama-server", action="store_true", help=f"measure {LLAMA_SERVER} (llama.cpp's own "
                        "server, built once per machine) too, in the throughput levels and the cold start")  # fmt: skip
    parser.add_argument("--phases", type=parse_phases, default=PHASES, help="what to measure, among "
                        f"{','.join(PHASES)} (default all)")  # fmt: skip
    parser.add_argument("--runs", type=int, help="cold-start and prefix runs (default 5, quick 2)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wait-quiet", type=float, default=60.0, metavar="SECONDS",
                        help=f"before each phase, wait up to this long for others to use under {QUIET_CORES} "
                        "cores")  # fmt: skip
    args = parser.parse_args(argv)
    if (args.runs is not None and args.runs < 1) or args.max_tokens < 2 or args.threads < 1:
        parser.error("--runs and --threads must be >= 1, --max-tokens >= 2")
    return args


def plan_of(args: argparse.Namespace) -> Plan:
    levels = args.levels or (QUICK_LEVELS if args.quick else DEFAULT_LEVELS)
    runs = args.runs or (2 if args.quick else 5)
    servers = (*SERVERS, LLAMA_SERVER) if args.llama_server else SERVERS
    return Plan(levels, args.quick, runs, args.threads, args.max_tokens, servers, args.phases)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = plan_of(args)
    if LLAMA_SERVER in plan.servers:
        llama_server_binary()  # built (once per machine) before anything is measured
    with (
        frozen_source() as src,
        tempfile.NamedTemporaryFile("w", prefix="cirrus-serving-", suffix=".log", delete=False) as log,
    ):
        frozen = source_digest(src)
        print("\n".join(header(plan, frozen)), flush=True)
        for model in args.model or [DEFAULT_MODEL, GEMMA]:
            run = measure_model(model, plan, Phases(args.wait_quiet), log)
            print("\n".join(model_report(run)), flush=True)
    print(working_tree_line(frozen))
    print(f"server logs: {log.name}")
    return 0


def working_tree_line(frozen: str) -> str:
    """Whether src/ changed while a benchmark served its frozen copy (digest `frozen`)."""
    live = source_digest(ROOT / "src")
    edited = "" if live == frozen else " (edited while the benchmark ran; the figures are for the copy)"
    return f"src/ of the working tree at the end: digest {live}{edited}"


if __name__ == "__main__":
    sys.exit(main())
