"""Core latency benchmark: raw llama-cpp-python against Cirrus over HTTP, warm and cold.

Usage: .venv/bin/python bench/core.py [--model @cf/...] [--runs N] [--max-tokens N] [--threads N]
                                      [--wait-quiet SECONDS]
"""

import argparse
import json
import os
import platform
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from cirrus.catalog import DEFAULT_MODEL, ModelSpec, load_catalog
from cirrus.catalog.artifacts import materialize
from cirrus.config import default_cache_dir

USER_MESSAGE = (
    "Write a long, detailed essay about the history of the printing press: its invention, how it spread "
    "across Europe, and its effects on science, religion and literacy."
)
COMPLETION_TEXT = "The history of the printing press begins in the fifteenth century, when"
FIRST_TOKEN_MARKER = b"FIRST-TOKEN\n"
SERVER_START_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 300.0
CHILD_TIMEOUT_S = 120.0
WARM_TTFT_SLACK_S = 0.030
WARM_DECODE_RATIO = 0.95
QUIET_CORES = 0.25
QUIET_WINDOW_S = 3.0
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")

NAIVE_CHILD = """
import sys
import llama_cpp
path, n_ctx, threads, prompt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False)
tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
for token in llm.generate(tokens, top_k=40, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
    llm.detokenize([token])
    sys.stdout.buffer.write(b"FIRST-TOKEN\\n")
    sys.stdout.flush()
    break
"""


@dataclass(frozen=True)
class Config:
    spec: ModelSpec
    path: Path
    threads: int
    max_tokens: int
    runs: int


@dataclass(frozen=True)
class Stream:
    ttft_s: float
    first_s: float
    last_s: float
    completion_tokens: int
    prompt_tokens: int

    @classmethod
    def of(cls, started: float, stamps: list[float], completion_tokens: int, prompt_tokens: int) -> "Stream":
        if not stamps:
            raise RuntimeError("the stream produced no text")
        return cls(stamps[0] - started, stamps[0], stamps[-1], completion_tokens, prompt_tokens)

    @property
    def decode_tps(self) -> float:
        span = self.last_s - self.first_s
        return (self.completion_tokens - 1) / span if span > 0 else float("nan")


@dataclass(frozen=True)
class CpuSample:
    wall_s: float
    busy_s: float
    own_s: float


@dataclass
class Results:
    raw_load_s: list[float]
    raw: list[Stream]
    warm: list[Stream]
    cirrus_cold: list[Stream]
    naive_cold: list[float]
    others_cores: dict[str, float]


# -- machine and model -----------------------------------------------------------------------------------------


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def busy_cpu_s() -> float:
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) * TICK_S


def process_table() -> dict[int, tuple[int, float]]:
    table: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) * TICK_S)
    return table


def own_tree_cpu_s() -> float:
    """CPU time of this process and its descendants, living or reaped."""
    table = process_table()
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in table.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(table[pid][1] for pid in tree if pid in table)


def cpu_sample() -> CpuSample:
    return CpuSample(time.perf_counter(), busy_cpu_s(), own_tree_cpu_s())


def others_cores(since: CpuSample) -> float:
    """Cores kept busy by processes outside this benchmark since a sample was taken."""
    now = cpu_sample()
    others = (now.busy_s - since.busy_s) - (now.own_s - since.own_s)
    return max(others, 0.0) / (now.wall_s - since.wall_s)


def wait_for_quiet(max_wait_s: float) -> str:
    """Wait (at most max_wait_s) until other processes keep less than QUIET_CORES busy over a short window."""
    deadline = time.monotonic() + max_wait_s
    while True:
        start = cpu_sample()
        time.sleep(QUIET_WINDOW_S)
        cores = others_cores(start)
        if cores < QUIET_CORES or time.monotonic() >= deadline:
            return f"{cores:.2f} cores busy with other work when the run began"


def resolve_config(args: argparse.Namespace) -> Config:
    cache_dir = Path(os.environ.get("CIRRUS_CACHE_DIR", default_cache_dir()))
    catalog = load_catalog(None, cache_dir)
    spec = catalog.require_installed(args.model)
    path = materialize(spec.artifact, cache_dir)
    return Config(spec, path, args.threads, args.max_tokens, args.runs)


def warm_page_cache(path: Path) -> None:
    with path.open("rb") as handle:
        while handle.read(16 * 1024 * 1024):
            pass


# -- raw llama-cpp-python in this process ----------------------------------------------------------------------


def load_llama(config: Config) -> tuple[llama_cpp.Llama, float]:
    started = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=str(config.path),
        n_ctx=config.spec.context_window,
        n_threads=config.threads,
        n_threads_batch=config.threads,
        verbose=False,
    )
    return llm, time.perf_counter() - started


def render_prompt(llm: llama_cpp.Llama) -> str:
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        return COMPLETION_TEXT
    model = llm._model
    eos, bos = llm.token_eos(), llm.token_bos()
    formatter = Jinja2ChatFormatter(
        template=template,
        eos_token=model.token_get_text(eos) if eos != -1 else "",
        bos_token=model.token_get_text(bos) if bos != -1 else "",
    )
    return formatter(messages=[{"role": "user", "content": USER_MESSAGE}]).prompt


def prompt_tokens(llm: llama_cpp.Llama, prompt: str) -> list[int]:
    return list(llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))


def raw_stream(llm: llama_cpp.Llama, tokens: list[int], max_tokens: int) -> Stream:
    vocab = llm._model.vocab
    started = time.perf_counter()
    stamps: list[float] = []
    for token in llm.generate(tokens, top_k=40, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            break
        llm.detokenize([token])
        stamps.append(time.perf_counter())
        if len(stamps) >= max_tokens:
            break
    return Stream.of(started, stamps, len(stamps), len(tokens))


def raw_loads(config: Config) -> tuple[llama_cpp.Llama, list[float]]:
    times: list[float] = []
    llm: llama_cpp.Llama | None = None
    for _ in range(config.runs):
        if llm is not None:
            llm.close()
        llm, seconds = load_llama(config)
        times.append(seconds)
    assert llm is not None
    return llm, times


# -- Cirrus over HTTP ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(client: httpx.Client, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"cirrus serve exited with code {server.returncode}")
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError("cirrus serve did not become ready")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=30)


@contextmanager
def cirrus_server(threads: int, log: IO[str], **settings: str) -> Iterator[httpx.Client]:
    """A Cirrus server with a state folder of its own, so that no prefix cache an earlier run left on disk
    (runtime/disk_tier.py) answers for this one; `settings` as CIRRUS_* variables (batch_concurrency="8")."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="cirrus-bench-state-") as state:
        env = {
            **os.environ,
            "CIRRUS_THREADS": str(threads),
            "CIRRUS_REQUEST_TIMEOUT_S": str(REQUEST_TIMEOUT_S),
            "CIRRUS_STATE_DIR": state,
            **{f"CIRRUS_{name.upper()}": value for name, value in settings.items()},
        }
        command = [sys.executable, "-m", "cirrus.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=REQUEST_TIMEOUT_S) as client:
                wait_ready(client, server)
                yield client
        finally:
            stop_server(server)


def request_body(prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "raw": True,
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0,
    }


def sse_events(response: httpx.Response) -> Iterator[tuple[float, dict[str, Any]]]:
    for line in response.iter_lines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            return
        event = json.loads(line[len("data: ") :])
        if event.get("success") is False:
            raise RuntimeError(f"cirrus error: {event.get('errors')}")
        yield time.perf_counter(), event


def cirrus_stream(client: httpx.Client, model: str, body: dict[str, Any]) -> Stream:
    started = time.perf_counter()
    stamps: list[float] = []
    usage: dict[str, int] = {}
    with client.stream("POST", f"/ai/run/{model}", json=body) as response:
        response.raise_for_status()
        for stamp, event in sse_events(response):
            if "usage" in event:
                usage = event["usage"]
            elif event.get("response"):
                stamps.append(stamp)
    if not usage:
        raise RuntimeError("the stream ended without usage")
    return Stream.of(started, stamps, usage["completion_tokens"], usage["prompt_tokens"])


def instances(client: httpx.Client) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = client.get("/admin/instances").json()["result"]["instances"]
    return result


def unload(client: httpx.Client, model: str) -> None:
    client.post(f"/admin/models/{model}/unload").raise_for_status()
    deadline = time.monotonic() + 30
    while instances(client):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{model} still has instances after unload")
        time.sleep(0.05)


def wait_for_spare(client: httpx.Client) -> None:
    """A serverless cold start comes after idle time, when a spare worker process is ready; wait for one."""
    deadline = time.monotonic() + 30
    while client.get("/admin/instances").json()["result"].get("spare_workers_ready", 0) < 1:
        if time.monotonic() > deadline:
            raise TimeoutError("no spare worker process became ready")
        time.sleep(0.05)


def cirrus_cold(client: httpx.Client, config: Config, body: dict[str, Any]) -> Stream:
    unload(client, config.spec.id)
    wait_for_spare(client)
    warm_page_cache(config.path)
    return cirrus_stream(client, config.spec.id, body)


# -- a naive cold start: a fresh process that loads the model and answers ------------------------------------


def read_marker(child: subprocess.Popen[bytes], deadline: float) -> float:
    assert child.stdout is not None
    fd, seen = child.stdout.fileno(), b""
    while FIRST_TOKEN_MARKER not in seen:
        remaining = deadline - time.perf_counter()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise TimeoutError("the naive child gave no first token in time")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError(f"the naive child exited early with code {child.wait(timeout=10)}")
        seen += chunk
    return time.perf_counter()


def naive_cold(config: Config, prompt: str) -> float:
    warm_page_cache(config.path)
    args = [str(config.path), str(config.spec.context_window), str(config.threads), prompt]
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", NAIVE_CHILD, *args], stdout=subprocess.PIPE)
    try:
        return read_marker(child, started + CHILD_TIMEOUT_S) - started
    finally:
        if child.stdout is not None:
            child.stdout.close()
        try:
            child.wait(timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)


# -- the run ---------------------------------------------------------------------------------------------------


def measure_warm(
    config: Config, llm: llama_cpp.Llama, prompt: str, client: httpx.Client
) -> tuple[list[Stream], list[Stream]]:
    tokens = prompt_tokens(llm, prompt)
    body = request_body(prompt, config.max_tokens)
    raw_stream(llm, tokens, config.max_tokens)
    cirrus_stream(client, config.spec.id, body)
    raw: list[Stream] = []
    warm: list[Stream] = []
    for _ in range(config.runs):
        raw.append(raw_stream(llm, tokens, config.max_tokens))
        warm.append(cirrus_stream(client, config.spec.id, body))
    return raw, warm


def measure_cold(config: Config, prompt: str, client: httpx.Client) -> tuple[list[Stream], list[float]]:
    body = request_body(prompt, config.max_tokens)
    cirrus: list[Stream] = []
    naive: list[float] = []
    for _ in range(config.runs):
        cirrus.append(cirrus_cold(client, config, body))
        naive.append(naive_cold(config, prompt))
    return cirrus, naive


def measure(config: Config, log: IO[str]) -> Results:
    others: dict[str, float] = {}
    warm_page_cache(config.path)
    start = cpu_sample()
    llm, loads = raw_loads(config)
    others["load"] = others_cores(start)
    prompt = render_prompt(llm)
    with cirrus_server(config.threads, log) as client:
        start = cpu_sample()
        raw, warm = measure_warm(config, llm, prompt, client)
        others["warm"] = others_cores(start)
        llm.close()
        start = cpu_sample()
        cirrus, naive = measure_cold(config, prompt, client)
        others["cold"] = others_cores(start)
    return Results(loads, raw, warm, cirrus, naive, others)


# -- report ----------------------------------------------------------------------------------------------------


def row(name: str, values: Sequence[float], unit: str) -> str:
    median, low, high = statistics.median(values), min(values), max(values)
    return f"{name:40} {median:10.1f} {low:10.1f} {high:10.1f}  {unit}"


def series(results: Results) -> list[tuple[str, list[float], str]]:
    ms = 1000.0
    return [
        ("raw llama-cpp-python: load", [v * ms for v in results.raw_load_s], "ms"),
        ("raw llama-cpp-python: TTFT", [s.ttft_s * ms for s in results.raw], "ms"),
        ("raw llama-cpp-python: decode", [s.decode_tps for s in results.raw], "tok/s"),
        ("Cirrus warm (HTTP SSE): TTFT", [s.ttft_s * ms for s in results.warm], "ms"),
        ("Cirrus warm (HTTP SSE): decode", [s.decode_tps for s in results.warm], "tok/s"),
        ("Cirrus cold start: TTFT", [s.ttft_s * ms for s in results.cirrus_cold], "ms"),
        ("naive fresh process: spawn to 1st token", [v * ms for v in results.naive_cold], "ms"),
    ]


def table(results: Results) -> list[str]:
    title = f"{'measurement':40} {'median':>10} {'min':>10} {'max':>10}  unit"
    return [title, *(row(name, values, unit) for name, values, unit in series(results))]


def samples(results: Results) -> list[str]:
    return [f"{name:40} {' '.join(f'{v:.1f}' for v in values)}" for name, values, _ in series(results)]


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def targets(results: Results) -> list[str]:
    raw_tps = statistics.median(s.decode_tps for s in results.raw)
    warm_tps = statistics.median(s.decode_tps for s in results.warm)
    gap_s = statistics.median(s.ttft_s for s in results.warm) - statistics.median(
        s.ttft_s for s in results.raw
    )
    cold_s = statistics.median(s.ttft_s for s in results.cirrus_cold)
    naive_s = statistics.median(results.naive_cold)
    ratio = warm_tps / raw_tps
    return [
        f"warm decode >= 0.95x raw:        {ratio:.3f}x  {verdict(ratio >= WARM_DECODE_RATIO)}",
        f"warm TTFT within 30 ms of raw:   {gap_s * 1000:+.1f} ms  {verdict(gap_s <= WARM_TTFT_SLACK_S)}",
        f"cold start <= naive process:     {cold_s / naive_s:.3f}x ({(cold_s - naive_s) * 1000:+.1f} ms)  "
        f"{verdict(cold_s <= naive_s)}",
    ]


def token_counts(results: Results) -> str:
    def spread(streams: list[Stream], attr: str) -> str:
        values = sorted({getattr(s, attr) for s in streams})
        return "/".join(str(v) for v in values)

    return (
        f"prompt tokens: raw {spread(results.raw, 'prompt_tokens')}, "
        f"Cirrus {spread(results.warm + results.cirrus_cold, 'prompt_tokens')}; "
        f"completion tokens: raw {spread(results.raw, 'completion_tokens')}, "
        f"Cirrus {spread(results.warm + results.cirrus_cold, 'completion_tokens')}"
    )


def contention(results: Results) -> str:
    phases = ", ".join(f"{phase} {cores:.2f}" for phase, cores in results.others_cores.items())
    return f"cores kept busy by other processes during each phase (of {os.cpu_count()}): {phases}"


def header(config: Config, load_before: str) -> list[str]:
    return [
        f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"llama-cpp-python {llama_cpp.__version__}",
        f"model: {config.spec.id} ({config.path.name}), n_ctx {config.spec.context_window}, "
        f"{config.threads} threads, greedy, max_tokens {config.max_tokens}, {config.runs} runs each",
        f"load average before: {load_before}",
    ]


def report(config: Config, results: Results, load_before: str) -> str:
    lines = header(config, load_before)
    lines += [f"load average after:  {load_average()}", contention(results), token_counts(results), ""]
    lines += [
        *table(results),
        "",
        "targets:",
        *targets(results),
        "",
        "samples, in run order:",
        *samples(results),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a catalog model id")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help=f"first wait up to this long for other processes to use under {QUIET_CORES} cores",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.max_tokens < 2 or args.threads < 1 or args.wait_quiet < 0:
        parser.error("--runs and --threads must be >= 1, --max-tokens >= 2, --wait-quiet >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = resolve_config(args)
    quiet = wait_for_quiet(args.wait_quiet)
    load_before = f"{load_average()} ({quiet})"
    with tempfile.NamedTemporaryFile("w", prefix="cirrus-bench-", suffix=".log", delete=False) as log:
        results = measure(config, log)
    print(report(config, results, load_before))
    print(f"\nserver log: {log.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
