"""Multi-turn benchmark: chat conversations whose histories grow, against Cirrus, llama.cpp's llama-server and
llama-cpp-python's server.

Usage: .venv/bin/python -m bench.conversations [--conversations 8,32] [--turns 6] [--levels 1,8]
           [--servers cirrus,llama-server,llama-cpp-python] [--max-tokens 64] [--quick] [--model @cf/...]
           [--threads N] [--pause-ms MS] [--wait-quiet SECONDS]

Each turn's prompt is the conversation so far, as a chat client sends it: the system prompt, the earlier user
messages with the server's own earlier answers, and a new user message. Conversations are interleaved turn by turn
(conversation 0 turn 1, conversation 1 turn 1, ..., conversation 0 turn 2, ...); at concurrency c, c callers each
take the next pending turn, a conversation's next turn only once its previous answer is in. Each server is
started by the benchmark for each measurement and measured while the others are stopped. With --pause-ms each
caller waits after an answer before it takes the next turn, as people do, and the server idles in between.
"""

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import IO, Any

import httpx
import llama_cpp

from bench.core import QUIET_CORES, REQUEST_TIMEOUT_S, Config, cpu_model, load_average, resolve_config
from bench.peers import (
    LLAMA_SERVER_CONTEXT,
    LLAMA_SERVER_SLOTS,
    llama_server_binary,
    llama_server_command,
    peer_command,
    progress,
)
from bench.serving import (
    CIRRUS,
    LLAMA_SERVER,
    PEER,
    ROOT,
    SPARE_SETTLE_S,
    WARM_UP_TOKENS,
    Api,
    Phases,
    Prompt,
    async_client,
    busy_line,
    choice_of,
    cirrus_command,
    closed_loop,
    frozen_source,
    git_head,
    server_url,
    source_digest,
    sse_events,
    watched,
    working_tree_line,
)
from cirrus.catalog import DEFAULT_MODEL

# Tokens of KV prefixes Cirrus keeps in host memory here: about 750 MB for SmolLM2 (23 KB a token).
HOST_CACHE_TOKENS = 32768

SERVER_NAMES = {"cirrus": CIRRUS, "llama-server": LLAMA_SERVER, "llama-cpp-python": PEER}
DEFAULT_CONVERSATIONS, DEFAULT_TURNS, DEFAULT_LEVELS = (8, 32), 6, (1, 8)
QUICK_CONVERSATIONS, QUICK_TURNS, QUICK_LEVELS = (4,), 3, (1,)
USER_WORDS = (20, 60)
PERCENTILES = (50, 99)

SYSTEM_PROMPT = (
    "You are a friendly and knowledgeable assistant. Give practical, specific advice, explain your reasoning in "
    "plain words, and keep each answer focused on the user's situation."
)
SUBJECTS = (
    "growing tomatoes on a balcony", "learning to play the guitar", "training for a half marathon",
    "baking sourdough bread", "planning a two-week trip to Japan", "setting up a freshwater aquarium",
    "learning Spanish as an adult", "building a bookshelf from scratch", "starting a vegetable garden",
    "keeping a small flock of chickens", "repairing an old road bicycle", "learning to draw portraits",
    "brewing better coffee at home", "organising a community book club", "writing a first short story",
    "saving money for a house deposit", "teaching a puppy basic commands", "painting a small apartment",
    "learning to swim properly", "choosing a first telescope", "cooking for a family on a budget",
    "making candles at home", "keeping houseplants alive", "preparing for a job interview",
    "restoring a wooden dining table", "learning basic car maintenance", "starting to run a podcast",
    "knitting a first sweater", "planning a wedding on a budget", "learning to juggle",
    "photographing birds in a city park", "composting kitchen waste",
)  # fmt: skip
OPENERS = (
    "Hello! I would like some help with {subject}.",
    "Hi, I have a few questions about {subject}.",
    "Good morning. I am new to {subject} and would love some guidance.",
    "I have been thinking about {subject} for a while and finally want to start.",
)
FOLLOW_UPS = (
    "Thanks, that is helpful.",
    "Interesting, I did not know that.",
    "Okay, that makes sense to me.",
    "I see, but I am still a little unsure.",
    "Great, I tried some of that already.",
)
DETAILS = (
    "I have about {n} hours a week to spend on it, mostly on weekends.",
    "My budget is roughly {n}0 dollars, and I would rather not spend more than that.",
    "I tried something similar {n} years ago and it did not go very well.",
    "A friend of mine says patience matters most, and I wonder whether that is really true.",
    "I live in a small flat in a rainy city, so space and weather are both a problem.",
    "I would like to see some real progress within {n} weeks if that is possible.",
    "I have read a few articles online, but they seem to contradict each other.",
    "My partner is interested too, so we could share the work between the two of us.",
    "I tend to lose motivation after a couple of weeks, so I need a plan that keeps me going.",
    "Money is tight this month, so cheap options would be best for now.",
)
PLACES = ("Lisbon", "Toronto", "Nairobi", "Osaka", "Glasgow", "Santiago", "Hanoi", "Adelaide")
QUESTIONS = (
    "When it comes to {subject}, what should I do first, and what can wait until later?",
    "Could you explain the main steps of {subject} as a short list?",
    "What are the most common mistakes beginners make with {subject}?",
    "How would you change your advice on {subject} given what I just told you?",
    "Which tools or materials do I really need for {subject}, and which are optional?",
    "How can I tell whether I am making progress with {subject}?",
    "What would you do differently about {subject} if you were in my place?",
)
REDRAWS = 20


# -- the workload ------------------------------------------------------------------------------------------------


def subject_of(conversation: int) -> str:
    """Distinct for each conversation up to len(SUBJECTS) * (len(PLACES) + 1)."""
    subject, rounds = SUBJECTS[conversation % len(SUBJECTS)], conversation // len(SUBJECTS)
    return f"{subject} in {PLACES[(rounds - 1) % len(PLACES)]}" if rounds else subject


def user_message(conversation: int, turn: int, draw: int = 0) -> str:
    """The user's turn-th message (0-based) in a conversation: deterministic, USER_WORDS words long, naming the
    conversation's subject; another draw gives another message."""
    rng = random.Random(f"conversation {conversation} turn {turn} draw {draw}")
    subject = subject_of(conversation)
    first = rng.choice(OPENERS if turn == 0 else FOLLOW_UPS).format(subject=subject)
    first_question = random.Random(f"conversation {conversation}").randrange(len(QUESTIONS))
    question = QUESTIONS[(first_question + turn + draw) % len(QUESTIONS)].format(subject=subject)
    low, high = USER_WORDS
    target = rng.randint(low, high)
    details: list[str] = []
    words = len(first.split()) + len(question.split())
    for detail in rng.sample(DETAILS, len(DETAILS)):
        text = detail.format(n=rng.randint(2, 9))
        if words >= target or words + len(text.split()) > high:
            break
        details.append(text)
        words += len(text.split())
    return " ".join([first, *details, question])


def conversation_messages(conversation: int, turns: int) -> list[str]:
    """A conversation's user messages, none repeating an earlier one."""
    messages: list[str] = []
    for turn in range(turns):
        draws = (user_message(conversation, turn, draw) for draw in range(REDRAWS))
        messages.append(next((m for m in draws if m not in messages), user_message(conversation, turn)))
    return messages


def workload(conversations: int, turns: int) -> list[list[str]]:
    """Each conversation's user messages, in order."""
    return [conversation_messages(c, turns) for c in range(conversations)]


def chat_messages(history: Sequence[tuple[str, str]], user: str) -> list[dict[str, str]]:
    """What a chat client sends: the system prompt, the earlier (user, answer) exchanges, the new message."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    for asked, answered in history:
        messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
    return [*messages, {"role": "user", "content": user}]


class Schedule:
    """Which turn a free caller takes next: round-robin turn by turn over the conversations, a conversation's next
    turn only once its previous answer is in."""

    def __init__(self, conversations: int, turns: int) -> None:
        self.turns = turns
        self._next = [0] * conversations
        self._busy: set[int] = set()

    def take(self) -> tuple[int, int] | None:
        """The (conversation, turn) to ask now, or None when every pending turn waits for an answer."""
        ready = [c for c, turn in enumerate(self._next) if turn < self.turns and c not in self._busy]
        if not ready:
            return None
        conversation = min(ready, key=lambda c: (self._next[c], c))
        self._busy.add(conversation)
        return conversation, self._next[conversation]

    def answered(self, conversation: int) -> None:
        self._busy.remove(conversation)
        self._next[conversation] += 1

    @property
    def untaken(self) -> int:
        """Turns not yet taken by any caller."""
        return sum(self.turns - turn for turn in self._next) - len(self._busy)

    @property
    def takeable(self) -> bool:
        return any(turn < self.turns and c not in self._busy for c, turn in enumerate(self._next))


# -- statistics --------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, interpolated between the closest ranks (statistics.quantiles' inclusive method)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


@dataclass(frozen=True)
class Answer:
    conversation: int
    turn: int
    text: str
    ttft_s: float
    sent: float
    last_s: float
    completion_tokens: int
    prompt_tokens: int | None
    cached_tokens: int | None


def prompt_counts(usage: dict[str, Any], timings: dict[str, Any]) -> tuple[int | None, int | None]:
    """(prompt tokens, of which cached) as the server reports them: OpenAI's usage (Cirrus, llama-server), else
    llama-server's timings (prompt_n evaluated, cache_n reused); (None, None) when it reports neither."""
    if "prompt_tokens" in usage:
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is None and "cache_n" in timings:
            cached = timings["cache_n"]
        return int(usage["prompt_tokens"]), None if cached is None else int(cached)
    if "prompt_n" in timings and "cache_n" in timings:
        return int(timings["prompt_n"]) + int(timings["cache_n"]), int(timings["cache_n"])
    return None, None


def cached_share(answers: Sequence[Answer]) -> float | None:
    """Cached prompt tokens over prompt tokens, over the answers whose server reported both; None if none did."""
    known = [a for a in answers if a.prompt_tokens is not None and a.cached_tokens is not None]
    prompt = sum(a.prompt_tokens or 0 for a in known)
    return sum(a.cached_tokens or 0 for a in known) / prompt if prompt else None


def by_turn(answers: Sequence[Answer]) -> dict[int, list[Answer]]:
    turns: dict[int, list[Answer]] = {}
    for answer in sorted(answers, key=lambda a: a.turn):
        turns.setdefault(answer.turn, []).append(answer)
    return turns


@dataclass(frozen=True)
class Run:
    """One server's replay of every conversation at one concurrency."""

    server: str
    conversations: int
    concurrency: int
    answers: list[Answer]

    @property
    def wall_s(self) -> float:
        """From the first request sent to the last token received."""
        return max(a.last_s for a in self.answers) - min(a.sent for a in self.answers)

    @property
    def tokens(self) -> int:
        return sum(a.completion_tokens for a in self.answers)

    @property
    def aggregate_tps(self) -> float:
        return self.tokens / self.wall_s

    def ttft_s(self, q: float, turn: int | None = None) -> float:
        answers = self.answers if turn is None else by_turn(self.answers)[turn]
        return percentile([a.ttft_s for a in answers], q)


# -- one streamed turn, and the replay ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Streamed:
    text: str
    deltas: int
    sent: float
    first: float
    last: float
    usage: dict[str, Any]
    timings: dict[str, Any]


async def ask(
    client: httpx.AsyncClient, api: Api, server: str, messages: list[dict[str, str]], max_tokens: int
) -> Streamed:
    """Stream one chat answer; an answer without text has its first and last token at the end of the stream."""
    stamps: list[float] = []
    parts: list[str] = []
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    sent = time.perf_counter()
    async with (
        asyncio.timeout(REQUEST_TIMEOUT_S),
        client.stream("POST", api.path, json=api.body(messages, max_tokens, server)) as response,
    ):
        response.raise_for_status()
        async for stamp, event in sse_events(response):
            text, _ = choice_of(event)
            if text:
                stamps.append(stamp)
                parts.append(text)
            usage, timings = event.get("usage") or usage, event.get("timings") or timings
    ended = time.perf_counter()
    first, last = (stamps[0], stamps[-1]) if stamps else (ended, ended)
    return Streamed("".join(parts), len(stamps), sent, first, last, usage, timings)


def answer_of(where: tuple[int, int], streamed: Streamed) -> Answer:
    """Completion tokens from usage, else (llama-cpp-python) one per content delta."""
    prompt, cached = prompt_counts(streamed.usage, streamed.timings)
    completion = int(streamed.usage.get("completion_tokens", streamed.deltas))
    ttft = streamed.first - streamed.sent
    return Answer(*where, streamed.text, ttft, streamed.sent, streamed.last, completion, prompt, cached)


@dataclass
class Replay:
    """The conversations' state while callers work through them."""

    api: Api
    server: str
    messages: list[list[str]]
    max_tokens: int
    pause_s: float = 0.0  # a caller's wait after an answer before its next request

    def __post_init__(self) -> None:
        self.schedule = Schedule(len(self.messages), len(self.messages[0]))
        self.histories: list[list[tuple[str, str]]] = [[] for _ in self.messages]
        self.answers: list[Answer] = []
        self.changed = asyncio.Condition()

    async def caller(self, client: httpx.AsyncClient) -> None:
        while True:
            async with self.changed:
                await self.changed.wait_for(lambda: self.schedule.takeable or not self.schedule.untaken)
                taken = self.schedule.take()
            if taken is None:
                return
            conversation, turn = taken
            history, user = self.histories[conversation], self.messages[conversation][turn]
            messages = chat_messages(history, user)
            answer = answer_of(taken, await ask(client, self.api, self.server, messages, self.max_tokens))
            history.append((user, answer.text))
            self.answers.append(answer)
            async with self.changed:
                self.schedule.answered(conversation)
                self.changed.notify_all()
            await asyncio.sleep(self.pause_s)


async def warm_up(client: httpx.AsyncClient, api: Api, server: str, concurrency: int) -> None:
    """A model loaded and c requests served before measuring: distinct one-turn chats, not the measured ones."""
    prompts: list[Prompt] = [
        chat_messages([], f"Warm-up request {i}: say hello.") for i in range(concurrency)
    ]
    await closed_loop(client, api, server, prompts, concurrency, WARM_UP_TOKENS)
    if server == CIRRUS:  # a cold start above takes the spare worker; its replacement starts 2 s later
        await asyncio.sleep(SPARE_SETTLE_S)


async def session(
    url: str, api: Api, server: str, messages: list[list[str]], concurrency: int, tokens: int, pause_s: float
) -> Run:
    async with async_client(url, concurrency) as client:
        await warm_up(client, api, server, concurrency)
        replay = Replay(api, server, messages, tokens, pause_s)
        await asyncio.gather(*(replay.caller(client) for _ in range(concurrency)))
    return Run(server, len(messages), concurrency, replay.answers)


def measure_run(
    config: Config, api: Api, server: str, messages: list[list[str]], concurrency: int, pause_s: float,
    log: IO[str], noisy: threading.Event,
) -> Run:  # fmt: skip
    with server_url(server, config, log) as url:
        work = session(url, api, server, messages, concurrency, config.max_tokens, pause_s)
        return asyncio.run(watched(work, noisy))


# -- the whole run -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    conversations: tuple[int, ...]
    turns: int
    levels: tuple[int, ...]
    servers: tuple[str, ...]
    pause_s: float = 0.0


def measure_all(config: Config, api: Api, plan: Plan, phases: Phases, log: IO[str]) -> list[Run]:
    """Each server started fresh for each (conversations, concurrency), in turn, the others stopped."""
    runs = []
    for conversations in plan.conversations:
        messages = workload(conversations, plan.turns)
        for concurrency in plan.levels:
            for server in plan.servers:
                name = f"N={conversations} c={concurrency} {server}"
                started = time.monotonic()
                measure = partial(measure_run, config, api, server, messages, concurrency, plan.pause_s, log)
                runs.append(phases.run(name, measure))
                progress(f"{name}: measured in {time.monotonic() - started:.0f} s")
    return runs


# -- report ------------------------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def share_text(share: float | None) -> str:
    return "n/a" if share is None else f"{share * 100:.1f}%"


def prompt_total(answers: Sequence[Answer]) -> str:
    counted = [a.prompt_tokens for a in answers if a.prompt_tokens is not None]
    return str(sum(counted)) if len(counted) == len(answers) else "n/a"


def run_row(run: Run) -> str:
    empty = sum(1 for a in run.answers if not a.text)
    return (
        f"{run.server:17} {len(run.answers):>5} {run.tokens:>6} {run.aggregate_tps:>9.1f} "
        f"{ms(run.ttft_s(50)):>8} {ms(run.ttft_s(99)):>8} {share_text(cached_share(run.answers)):>7} "
        f"{prompt_total(run.answers):>9} {empty:>5}"
    )


def turn_rows(runs: Sequence[Run], title: str, cell: Callable[[Run, int], str]) -> list[str]:
    turns = sorted(by_turn(runs[0].answers))
    lines = [f"{title:26}" + "".join(f"{'turn ' + str(t + 1):>12}" for t in turns)]
    return lines + [f"  {run.server:24}" + "".join(f"{cell(run, t):>12}" for t in turns) for run in runs]


def ttft_cell(run: Run, turn: int) -> str:
    return "/".join(ms(run.ttft_s(q, turn)) for q in PERCENTILES)


def cached_cell(run: Run, turn: int) -> str:
    return share_text(cached_share(by_turn(run.answers)[turn]))


def prompt_cell(run: Run, turn: int) -> str:
    counted = [a.prompt_tokens for a in by_turn(run.answers)[turn] if a.prompt_tokens is not None]
    return f"{statistics.median(counted):.0f}" if counted else "n/a"


def block(runs: Sequence[Run], turns: int) -> list[str]:
    first = runs[0]
    return [
        f"== {first.conversations} conversations x {turns} turns, concurrency {first.concurrency}",
        f"{'server':17} {'turns':>5} {'tokens':>6} {'agg tok/s':>9} {'TTFT p50':>8} {'TTFT p99':>8} "
        f"{'cached':>7} {'prompt tok':>9} {'empty':>5}",
        *(run_row(run) for run in runs),
        *turn_rows(runs, "TTFT p50/p99 ms by turn", ttft_cell),
        *turn_rows(runs, "cached share by turn", cached_cell),
        *turn_rows(runs, "prompt tokens by turn (p50)", prompt_cell),
        "",
    ]


def ratio_lines(runs: Sequence[Run], turns: int) -> list[str]:
    pairs = [
        (run, peer)
        for run in runs
        if run.server == CIRRUS
        for peer in runs
        if peer.server == LLAMA_SERVER
        and (peer.conversations, peer.concurrency) == (run.conversations, run.concurrency)
    ]
    if not pairs:
        return []
    by_turn_title = " ".join(f"{t + 1:>5}" for t in range(turns))
    lines = [
        f"{CIRRUS} / {LLAMA_SERVER} (TTFT: below 1 is {CIRRUS} faster; tok/s: above 1 is {CIRRUS} faster)",
        f"{'N':>4} {'c':>3} {'TTFT p50':>9} {'TTFT p99':>9} {'agg tok/s':>9}   TTFT p50 by turn {by_turn_title}",
    ]
    for cirrus, peer in pairs:
        per_turn = " ".join(f"{cirrus.ttft_s(50, t) / peer.ttft_s(50, t):>5.2f}" for t in range(turns))
        lines.append(
            f"{cirrus.conversations:>4} {cirrus.concurrency:>3} {cirrus.ttft_s(50) / peer.ttft_s(50):>8.2f}x "
            f"{cirrus.ttft_s(99) / peer.ttft_s(99):>8.2f}x {cirrus.aggregate_tps / peer.aggregate_tps:>8.2f}x"
            f"                    {per_turn}"
        )
    return [*lines, ""]


def report(runs: list[Run], turns: int) -> list[str]:
    lines = []
    for key in dict.fromkeys((run.conversations, run.concurrency) for run in runs):
        lines += block([run for run in runs if (run.conversations, run.concurrency) == key], turns)
    return lines + ratio_lines(runs, turns)


def server_commands(config: Config, servers: Sequence[str]) -> list[str]:
    commands = {
        CIRRUS: cirrus_command(config.threads),
        LLAMA_SERVER: " ".join(llama_server_command(llama_server_binary(), config, "PORT"))
        if LLAMA_SERVER in servers
        else "",
        PEER: " ".join(peer_command(config, "PORT")) + " (requests with repeat_penalty 1.0)",
    }
    lines = [f"{server} command: {commands[server]}" for server in servers]
    if LLAMA_SERVER in servers:
        lines.append(
            f"{LLAMA_SERVER} prompt cache at its defaults: {LLAMA_SERVER_SLOTS} slots sharing "
            f"{LLAMA_SERVER_CONTEXT} KV cells (--kv-unified), each slot reusing its cached prefix, --cache-ram "
            "8192 MiB (idle slots' prompts kept in host memory), --cache-reuse 0 (off)"
        )
    return lines


def header(config: Config, plan: Plan, digest: str) -> list[str]:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return [
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; git {git_head()}; Cirrus served from a copy of src/ "
        f"taken at the start, digest {digest}",
        f"machine: {cpu_model()}, {os.cpu_count()} cores, {memory:.0f} GiB, Linux {platform.release()}",
        f"versions: Python {platform.python_version()}, llama-cpp-python {llama_cpp.__version__}, "
        f"cirrus {importlib.metadata.version('cirrus')}, httpx {httpx.__version__}",
        f"model: {config.spec.id} ({config.path.name}), {config.threads} threads per server, greedy "
        f"(temperature 0), max_tokens {config.max_tokens}, streamed on /v1/chat/completions",
        f"workload: conversations {', '.join(map(str, plan.conversations))} x {plan.turns} turns, concurrency "
        f"{', '.join(map(str, plan.levels))}; one system prompt ({len(SYSTEM_PROMPT.split())} words), distinct "
        f"user messages of {USER_WORDS[0]}-{USER_WORDS[1]} words; each turn sends the whole conversation so far "
        "with the server's own earlier answers"
        + (f"; each caller pauses {plan.pause_s * 1000:.0f} ms after an answer" if plan.pause_s else ""),
        *server_commands(config, plan.servers),
        "each server started fresh for each (conversations, concurrency) and measured while the others are "
        f"stopped; warm-up first: c one-turn chats of {WARM_UP_TOKENS} tokens; TTFT from sending the request to "
        "the first non-empty content delta; agg tok/s = completion tokens / (first send to last token); cached = "
        "sum of cached prompt tokens / sum of prompt tokens, as the server reports them (n/a: it reports none); "
        "empty = answers without text",
        "",
    ]


def parse_counts(text: str) -> tuple[int, ...]:
    counts = tuple(int(part) for part in text.split(",") if part.strip())
    if not counts or min(counts) < 1 or max(counts) > 256:
        raise argparse.ArgumentTypeError("comma-separated integers from 1 to 256")
    return counts


def parse_servers(text: str) -> tuple[str, ...]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in SERVER_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"servers are among {', '.join(SERVER_NAMES)}")
    return tuple(SERVER_NAMES[name] for name in dict.fromkeys(names))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a catalog chat model id")
    parser.add_argument("--conversations", type=parse_counts, help="conversation counts, e.g. 8,32")
    parser.add_argument("--turns", type=int, help=f"turns per conversation (default {DEFAULT_TURNS})")
    parser.add_argument("--levels", type=parse_counts, help="concurrency levels, e.g. 1,8")
    parser.add_argument("--servers", type=parse_servers, default=tuple(SERVER_NAMES.values()),
                        help=f"comma-separated, among {','.join(SERVER_NAMES)} (default all)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="4 conversations x 3 turns at concurrency 1")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--pause-ms", type=float, default=0.0,
                        help="each caller waits this long after an answer before its next request, as people "
                        "read before they type; the server idles in between (default 0)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--host-cache-tokens", type=int, default=HOST_CACHE_TOKENS,
                        help="Cirrus's host tier for the chat models, in tokens (its catalog default is half the "
                        f"KV cache; llama-server keeps up to 8 GiB of prompts in host memory by default); "
                        f"default {HOST_CACHE_TOKENS}")  # fmt: skip
    parser.add_argument("--wait-quiet", type=float, default=60.0, metavar="SECONDS",
                        help=f"before each measurement, wait up to this long for others to use under "
                        f"{QUIET_CORES} cores")  # fmt: skip
    args = parser.parse_args(argv)
    if (args.turns is not None and args.turns < 1) or args.max_tokens < 2 or args.threads < 1:
        parser.error("--turns and --threads must be >= 1, --max-tokens >= 2")
    if args.pause_ms < 0:
        parser.error("--pause-ms must be >= 0")
    return args


def plan_of(args: argparse.Namespace) -> Plan:
    conversations = args.conversations or (QUICK_CONVERSATIONS if args.quick else DEFAULT_CONVERSATIONS)
    turns = args.turns or (QUICK_TURNS if args.quick else DEFAULT_TURNS)
    levels = args.levels or (QUICK_LEVELS if args.quick else DEFAULT_LEVELS)
    return Plan(conversations, turns, levels, args.servers, args.pause_ms / 1000)


@contextlib.contextmanager
def host_cache_catalog(tokens: int) -> Iterator[None]:
    """The built-in catalog with `host_cache_tokens` set for every model that has a KV cache, given to the Cirrus
    servers this process starts (bench.core.cirrus_server passes the environment on)."""
    text = (ROOT / "src/cirrus/catalog/default.toml").read_text()
    text = re.sub(r"^(kv_cache_tokens = \d+.*)$", rf"\1\nhost_cache_tokens = {tokens}", text, flags=re.M)
    with tempfile.NamedTemporaryFile("w", prefix="cirrus-catalog-", suffix=".toml") as catalog:
        catalog.write(text)
        catalog.flush()
        previous = os.environ.get("CIRRUS_CATALOG")
        os.environ["CIRRUS_CATALOG"] = catalog.name
        try:
            yield
        finally:
            if previous is None:
                del os.environ["CIRRUS_CATALOG"]
            else:
                os.environ["CIRRUS_CATALOG"] = previous


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = plan_of(args)
    config = resolve_config(
        argparse.Namespace(model=args.model, threads=args.threads, max_tokens=args.max_tokens, runs=1)
    )
    if LLAMA_SERVER in plan.servers:
        llama_server_binary()  # built (once per machine) before anything is measured
    started = time.monotonic()
    with (
        host_cache_catalog(args.host_cache_tokens),
        frozen_source() as src,
        tempfile.NamedTemporaryFile("w", prefix="cirrus-conversations-", suffix=".log", delete=False) as log,
    ):
        frozen = source_digest(src)
        print("\n".join(header(config, plan, frozen)), flush=True)
        print(
            f"Cirrus's catalog: the built-in one with host_cache_tokens = {args.host_cache_tokens}",
            flush=True,
        )
        load_before, phases = load_average(), Phases(args.wait_quiet)
        runs = measure_all(config, Api(config.spec.id, chat=True), plan, phases, log)
    print(f"load average before: {load_before}; after: {load_average()}")
    print(busy_line(phases.busy))
    print("")
    print("\n".join(report(runs, plan.turns)))
    print(working_tree_line(frozen))
    print(f"took {time.monotonic() - started:.0f} s; server logs: {log.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
