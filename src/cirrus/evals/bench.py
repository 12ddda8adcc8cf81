"""`cirrus bench`: drive a running server with streaming requests and measure what its callers wait.

Every request has its own prompt (a request number first, so no two share a cached prefix) and its own seed,
and skips the response cache. One unmeasured request first makes sure the model is loaded, so the measured
requests are warm; with --cold, that first request follows an unload and is reported as the cold start.
"""

import asyncio
import functools
import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from cirrus.evals.corpus import default_corpus
from cirrus.evals.errors import EvalError
from cirrus.evals.machine import machine_summary, utc_now
from cirrus.evals.stats import percentile

REQUEST_TIMEOUT_S = 300.0
UNLOAD_TIMEOUT_S = 60.0
WORDS_PER_TOKEN = 0.75


@dataclass(frozen=True)
class BenchConfig:
    url: str
    model: str
    requests: int = 16
    concurrency: int = 4
    prompt_tokens: int = 128
    max_tokens: int = 64
    token: str | None = None
    cold: bool = False


@dataclass(frozen=True)
class Timing:
    ttft_s: float
    latency_s: float
    prompt_tokens: int
    completion_tokens: int

    @property
    def decode_tps(self) -> float | None:
        span = self.latency_s - self.ttft_s
        return (self.completion_tokens - 1) / span if self.completion_tokens > 1 and span > 0 else None


@functools.cache
def _words() -> tuple[str, ...]:
    return tuple(default_corpus().text.split())


def prompt_text(index: int, tokens: int) -> str:
    words = list(_words())
    count = max(1, int(tokens * WORDS_PER_TOKEN))
    return f"Request {index}. " + " ".join((words * (count // len(words) + 1))[:count])


def _headers(config: BenchConfig) -> dict[str, str]:
    headers = {"cf-aig-skip-cache": "true"}
    if config.token:
        headers["Authorization"] = f"Bearer {config.token}"
    return headers


def _refusal(status: int, body: bytes) -> str:
    try:
        errors = json.loads(body).get("errors") or []
        return "; ".join(f"{e.get('message')} (code {e.get('code')})" for e in errors) or f"HTTP {status}"
    except (ValueError, AttributeError):
        return f"HTTP {status}, not a Cirrus reply"


def _event(line: str) -> dict[str, Any] | None:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return None
    event: dict[str, Any] = json.loads(line[len("data: ") :])
    if event.get("success") is False:
        raise EvalError(f"the server failed mid-stream: {event.get('errors')}")
    return event


async def stream_once(client: httpx.AsyncClient, config: BenchConfig, index: int) -> Timing:
    body = {"prompt": prompt_text(index, config.prompt_tokens), "raw": True, "stream": True}
    body |= {"max_tokens": config.max_tokens, "seed": index}
    started, first, usage = time.perf_counter(), None, None
    async with client.stream("POST", f"/ai/run/{config.model}", json=body, headers=_headers(config)) as reply:
        if reply.status_code != 200:
            raise EvalError(f"{config.model}: {_refusal(reply.status_code, await reply.aread())}")
        async for line in reply.aiter_lines():
            event = _event(line)
            if event is None:
                continue
            if event.get("response") and first is None:
                first = time.perf_counter()
            usage = event.get("usage", usage)
    if first is None or usage is None:
        raise EvalError(f"{config.model}: the stream ended without text or usage")
    done = time.perf_counter()
    return Timing(first - started, done - started, usage["prompt_tokens"], usage["completion_tokens"])


async def unload(client: httpx.AsyncClient, config: BenchConfig) -> None:
    """Stop the model's instances and wait until none is left, so the next request starts it cold."""
    reply = await client.post(f"/admin/models/{config.model}/unload", headers=_headers(config))
    if reply.status_code != 200:
        raise EvalError(f"could not unload {config.model}: {_refusal(reply.status_code, reply.content)}")
    deadline = time.monotonic() + UNLOAD_TIMEOUT_S
    while time.monotonic() < deadline:
        listing = (await client.get("/admin/instances", headers=_headers(config))).json()
        if not any(i["model"] == config.model for i in listing["result"]["instances"]):
            return
        await asyncio.sleep(0.05)
    raise EvalError(f"{config.model} still had instances {UNLOAD_TIMEOUT_S:.0f}s after unloading")


async def _batch(client: httpx.AsyncClient, config: BenchConfig) -> tuple[list[Timing], list[str], float]:
    gate = asyncio.Semaphore(config.concurrency)

    async def bounded(index: int) -> Timing:
        async with gate:
            return await stream_once(client, config, index)

    started = time.perf_counter()
    outcomes = await asyncio.gather(*(bounded(i + 1) for i in range(config.requests)), return_exceptions=True)
    wall = time.perf_counter() - started
    timings = [o for o in outcomes if isinstance(o, Timing)]
    errors = [str(o) for o in outcomes if isinstance(o, EvalError | httpx.HTTPError)]
    unexpected = [
        o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, EvalError | httpx.HTTPError)
    ]
    if unexpected:
        raise unexpected[0]
    return timings, errors, wall


def distribution(values: list[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "mean": statistics.fmean(values),
    }


def summarize(timings: list[Timing], errors: list[str], wall_s: float, concurrency: int) -> dict[str, Any]:
    if not timings:
        raise EvalError(f"every request failed; the first error: {errors[0] if errors else 'none recorded'}")
    decode = [t.decode_tps for t in timings if t.decode_tps is not None]
    ttft = [t.ttft_s for t in timings]
    prompt_mean = statistics.fmean(t.prompt_tokens for t in timings)
    return {
        "requests": len(timings),
        "errors": errors,
        "concurrency": concurrency,
        "wall_s": wall_s,
        "ttft_s": distribution(ttft),
        "latency_s": distribution([t.latency_s for t in timings]),
        "prompt_tokens_mean": prompt_mean,
        "completion_tokens_mean": statistics.fmean(t.completion_tokens for t in timings),
        "requests_per_s": len(timings) / wall_s,
        "output_tps": sum(t.completion_tokens for t in timings) / wall_s,
        "stream_prompt_tps": prompt_mean / statistics.median(ttft),
        "stream_decode_tps": statistics.median(decode) if decode else None,
    }


async def run_bench(config: BenchConfig) -> dict[str, Any]:
    if config.requests < 1 or config.concurrency < 1 or config.max_tokens < 1 or config.prompt_tokens < 1:
        raise EvalError("-n, -c, --prompt-tokens and --max-tokens must each be at least 1")
    limits = httpx.Limits(max_connections=config.concurrency + 2)
    async with httpx.AsyncClient(
        base_url=config.url.rstrip("/"), timeout=REQUEST_TIMEOUT_S, limits=limits
    ) as client:
        try:
            if config.cold:
                await unload(client, config)
            first = await stream_once(client, config, 0)
            timings, errors, wall = await _batch(client, config)
        except httpx.ConnectError:
            raise EvalError(f"no server at {config.url}; start one with `cirrus serve`") from None
        except httpx.TransportError as exc:
            raise EvalError(f"{config.url}: {type(exc).__name__}: {exc}") from None
    return {
        "url": config.url,
        "model": config.model,
        "date": utc_now(),
        "machine": machine_summary(),
        "settings": {k: v for k, v in asdict(config).items() if k not in ("token", "url")},
        "cold": asdict(first) if config.cold else None,
        "warm": summarize(timings, errors, wall, config.concurrency),
        "timings": [asdict(t) for t in timings],
    }


def bench_table(result: dict[str, Any]) -> str:
    warm = result["warm"]
    lines = [
        f"{result['model']} at {result['url']}: {warm['requests']} requests, concurrency {warm['concurrency']}"
    ]
    lines.append(f"{'':12}{'P50':>9}{'P90':>9}{'P99':>9}")
    for name in ("ttft_s", "latency_s"):
        d = warm[name]
        lines.append(f"{name:12}{d['p50']:>9.3f}{d['p90']:>9.3f}{d['p99']:>9.3f}")
    lines.append(
        f"throughput  {warm['requests_per_s']:.2f} requests/s, {warm['output_tps']:.1f} output tokens/s; "
        f"per stream {warm['stream_prompt_tps']:.0f} prompt and {warm['stream_decode_tps'] or 0:.1f} decode tokens/s"
    )
    if result["cold"]:
        cold = result["cold"]
        lines.append(f"cold start  TTFT {cold['ttft_s']:.3f}s, latency {cold['latency_s']:.3f}s")
    if warm["errors"]:
        lines.append(f"errors      {len(warm['errors'])}: {warm['errors'][0]}")
    return "\n".join(lines)
