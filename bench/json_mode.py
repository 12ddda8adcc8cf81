"""JSON mode benchmark: the share of `response_format: {"type": "json_object"}` answers that parse, per model and
max_tokens, over HTTP as a client sends them; and the decode cost of the worker's JSON tracking.

Usage: .venv/bin/python bench/json_mode.py [--model @cf/...]... [--limits 16,32,64,128] [--quick]
                                           [--concurrency N] [--threads N] [--overhead-only] [--examples N]

Chat models get the prompt as a user message, models without a chat template (Gemma 3 270M, a base model) as a
raw prompt after one worked example, both on /ai/run, with Workers AI's default sampling and a seed per prompt. An answer counts when the server answers 200
with a JSON value (a 422 "JSON Mode couldn't be met" does not). The tracking cost is measured in this process on
the worker's own scheduler: the time spent in `JsonSteering` beyond the sampler's own calls, per token.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/json_mode.py` from the root

from bench.core import cirrus_server
from cirrus.catalog import DEFAULT_MODEL, load_catalog
from cirrus.catalog.artifacts import materialize
from cirrus.config import default_cache_dir

MODELS = (DEFAULT_MODEL, "@cf/google/gemma-3-270m")
LIMITS = (16, 32, 64, 128)
QUICK_PROMPTS = 10
PROMPTS = (
    "Give a cat's name and color.",
    "What's a good breakfast before a run?",
    "Suggest three names for a bakery.",
    "How do I boil an egg?",
    "What is the capital of Australia?",
    "Plan a weekend trip to the mountains.",
    "List the ingredients of a pancake batter.",
    "Describe the weather in Paris in spring.",
    "Tell me a joke about computers.",
    "What should I pack for a beach holiday?",
    "Recommend a book for a long flight.",
    "How many legs does a spider have?",
    "Write a shopping list for a week of dinners.",
    "What are the planets of the solar system?",
    "Give me a workout for twenty minutes.",
    "Translate 'good morning' into French, Spanish and German.",
    "Which fruits are in season in autumn?",
    "How do I water a cactus?",
    "Summarise the plot of Cinderella.",
    "What time zone is Tokyo in?",
    "Name three famous painters and one work each.",
    "How do I make a cup of tea?",
    "Suggest a name for a black dog.",
    "What's the difference between a lake and a pond?",
    "Describe a good morning routine.",
    "Give me a recipe for tomato soup.",
    "What are the primary colors?",
    "Plan a birthday party for a seven-year-old.",
    "How long should I sleep each night?",
    "What do bees eat?",
    "List five board games for a family evening.",
    "Convert 10 kilometres into miles.",
    "What is the boiling point of water?",
    "Write a short poem about the sea.",
    "Give three tips for saving money on groceries.",
    "Who wrote Romeo and Juliet?",
    "Describe your ideal house.",
    "What's a healthy snack for kids?",
    "How do I change a flat bicycle tyre?",
    "Recommend three films for a rainy Sunday.",
    "What are the seasons of the year and their months?",
    "How do I clean a cast iron pan?",
    "Suggest a daily schedule for studying.",
    "What animals live in the Arctic?",
    "Give me a list of things to do in London.",
    "How do I say thank you in Japanese?",
    "What is photosynthesis, in one sentence?",
    "Describe a car for sale: make, model, year and price.",
    "Invent a character for a fantasy story.",
    "Give me the steps to plant tomatoes.",
)


@dataclass(frozen=True)
class Outcome:
    parsed: bool
    status: int
    completion_tokens: int
    answer: str


def request_body(model_chat: bool, prompt: str, max_tokens: int, seed: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "response_format": {"type": "json_object"},
        "max_tokens": max_tokens,
        "seed": seed,
    }
    if model_chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = completion_prompt(prompt)
    return body


def completion_prompt(prompt: str) -> str:
    """A base model is shown one answer first, as a client of a text-completion model would. No space after
    "A:": the model would write " {" as one token, which the grammar (no leading space) refuses."""
    return f'Q: Give a cat\'s name and color.\nA: {{"name": "Tom", "color": "grey"}}\nQ: {prompt}\nA:'


def ask(client: httpx.Client, model: str, body: dict[str, Any]) -> Outcome:
    response = client.post(f"/ai/run/{model}", json=body)
    if response.status_code != httpx.codes.OK:
        return Outcome(False, response.status_code, 0, response.text)
    result = response.json()["result"]
    answer = result["response"]
    parsed = isinstance(answer, dict | list)
    if isinstance(answer, str):
        try:
            parsed = isinstance(json.loads(answer), dict | list)
        except ValueError:
            parsed = False
    tokens = int(result.get("usage", {}).get("completion_tokens", 0))
    return Outcome(parsed, response.status_code, tokens, json.dumps(answer, ensure_ascii=False))


def has_chat_template(client: httpx.Client, model: str) -> bool:
    probe = client.post(
        f"/ai/run/{model}", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    )
    return probe.status_code == httpx.codes.OK


def measure_model(
    client: httpx.Client, model: str, prompts: tuple[str, ...], limits: tuple[int, ...], concurrency: int
) -> dict[int, list[Outcome]]:
    chat = has_chat_template(client, model)
    jobs = [
        (limit, seed, request_body(chat, prompt, limit, seed))
        for limit in limits
        for seed, prompt in enumerate(prompts)
    ]
    with ThreadPoolExecutor(concurrency) as pool:
        outcomes = list(pool.map(lambda job: ask(client, model, job[2]), jobs))
    table: dict[int, list[Outcome]] = {limit: [] for limit in limits}
    for (limit, _, _), outcome in zip(jobs, outcomes, strict=True):
        table[limit].append(outcome)
    return table


def print_table(model: str, table: dict[int, list[Outcome]], seconds: float, examples: int) -> None:
    print(f"\n{model} ({seconds:.0f} s)")
    print("  max_tokens  parsed         share   statuses            mean completion tokens")
    for limit, outcomes in table.items():
        parsed = sum(outcome.parsed for outcome in outcomes)
        statuses = ", ".join(
            f"{s}x{sum(o.status == s for o in outcomes)}" for s in sorted({o.status for o in outcomes})
        )
        tokens = sum(o.completion_tokens for o in outcomes) / max(1, sum(o.status == 200 for o in outcomes))
        print(
            f"  {limit:>10}  {parsed:>3}/{len(outcomes):<3}  {parsed / len(outcomes):>10.0%}   {statuses:<18}  {tokens:.1f}"
        )
        for outcome in outcomes[:examples]:
            print(f"              {outcome.answer[:150]}")


# -- the tracking's decode cost, on the worker's scheduler in this process ------------------------------------------


@dataclass
class Clock:
    spent_s: float = 0.0
    calls: int = 0


def timed(owner: Any, name: str, clock: Clock) -> Callable[[], None]:
    """Wrap `owner.name` to add its time to `clock`; returns the undo."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            clock.spent_s += time.perf_counter() - started
            clock.calls += 1

    setattr(owner, name, wrapper)
    return lambda: setattr(owner, name, original)


@contextmanager
def scheduler_for(path: Path, threads: int) -> Iterator[Any]:
    from cirrus.runtime.llama import ContextShape, LlamaModel
    from cirrus.runtime.prefix_cache import PrefixCache, sequence_ids
    from cirrus.runtime.prompts import PromptBuilder
    from cirrus.runtime.scheduler import BatchScheduler

    slots = 8
    model = LlamaModel(str(path), ContextShape(kv_cells=8192, sequences=sequence_ids(slots), threads=threads))
    prompts = PromptBuilder(model, model.metadata("tokenizer.chat_template"))
    cache = PrefixCache(model, sequence_ids(slots), None, idle_tokens=2048)
    frames: list[dict[str, Any]] = []
    try:
        yield (
            BatchScheduler(model, prompts, slots, 4096, frames.append, lambda _: False, cache),
            model,
            frames,
        )
    finally:
        model.close()


def measure_overhead(model_id: str, threads: int, prompts: tuple[str, ...]) -> None:
    from cirrus.families.json_schema_grammar import json_object_grammar
    from cirrus.runtime.json_steering import JsonSteering
    from cirrus.runtime.llama import LlamaModel, Sampler
    from cirrus.runtime.params import GenerationInput, SamplingParams

    cache_dir = Path(os.environ.get("CIRRUS_CACHE_DIR", default_cache_dir()))
    spec = load_catalog(None, cache_dir).get(model_id)
    path = materialize(spec.artifact, cache_dir)
    for max_tokens in (32, 256):
        steering, engine, steps = Clock(), Clock(), Clock()
        with scheduler_for(path, threads) as (scheduler, model, _frames):
            chat = model.metadata("tokenizer.chat_template") is not None
            undo = [
                timed(JsonSteering, "choose", steering),
                timed(LlamaModel, "sample", engine),
                timed(LlamaModel, "propose", engine),
                timed(Sampler, "accept", engine),
                timed(Sampler, "allows", engine),
            ]
            try:
                for index, prompt in enumerate(prompts):
                    sampling = SamplingParams(
                        max_tokens=max_tokens, seed=index, grammar=json_object_grammar(), json_mode=True
                    )
                    messages = ({"role": "user", "content": prompt},) if chat else None
                    inputs = GenerationInput(
                        prompt=None if chat else completion_prompt(prompt),
                        messages=messages,
                        sampling=sampling,
                    )
                    scheduler.submit({"type": "generate", "id": str(index), "input": inputs.to_frame()})
                while scheduler.busy:
                    started = time.perf_counter()
                    scheduler.step()
                    steps.spent_s += time.perf_counter() - started
                    steps.calls += 1
            finally:
                for restore in undo:
                    restore()
        tokens = max(1, steering.calls)
        own = steering.spent_s - engine.spent_s  # choose's own work: grammar tracking, closing, checks
        sampler = engine.spent_s / tokens
        print(
            f"{model_id} max_tokens {max_tokens}: {steering.calls} JSON-mode tokens over {steps.calls} decode steps "
            f"of {1000 * steps.spent_s / max(1, steps.calls):.1f} ms (8 sequences); tracking "
            f"{1e6 * own / tokens:.0f} us/token beyond the sampler's {1e6 * sampler:.0f} us/token"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", action="append", help="a catalog id (repeatable); default: both shipped")
    parser.add_argument("--limits", default=",".join(map(str, LIMITS)))
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_PROMPTS} prompts only")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--overhead-only", action="store_true", help="only the tracking's decode cost")
    parser.add_argument("--examples", type=int, default=0, help="answers to show per model and max_tokens")
    args = parser.parse_args()
    models = tuple(args.model or MODELS)
    limits = tuple(int(limit) for limit in args.limits.split(","))
    prompts = PROMPTS[:QUICK_PROMPTS] if args.quick else PROMPTS
    if not args.overhead_only:
        with tempfile.NamedTemporaryFile(
            "w", prefix="cirrus-bench-json-", suffix=".log", delete=False
        ) as log:
            print(f"server log: {log.name}")
            with cirrus_server(args.threads, log) as client:
                for model in models:
                    started = time.perf_counter()
                    table = measure_model(client, model, prompts, limits, args.concurrency)
                    print_table(model, table, time.perf_counter() - started, args.examples)
    print()
    for model in models:
        measure_overhead(model, args.threads, prompts[:8])


if __name__ == "__main__":
    main()
