"""The worker's scheduler over SmolLM2, driven step by step in the test's own process: what the worker does with
its frames, without a server between."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cirrus.catalog import load_catalog
from cirrus.catalog.artifacts import locate
from cirrus.runtime.frames import Frame
from cirrus.runtime.llama import ContextShape, LlamaModel
from cirrus.runtime.params import GenerationInput
from cirrus.runtime.prefix_cache import PrefixCache, sequence_ids
from cirrus.runtime.prompts import PromptBuilder
from cirrus.runtime.scheduler import BatchScheduler
from tests.integration.conftest import SMOLLM


class Engine:
    def __init__(self, scheduler: BatchScheduler, frames: list[Frame]) -> None:
        self.scheduler = scheduler
        self.frames = frames

    def submit(self, request_id: str, inputs: GenerationInput) -> None:
        self.scheduler.submit({"type": "generate", "id": request_id, "input": inputs.to_frame()})

    def run(self, requests: dict[str, GenerationInput]) -> dict[str, tuple[str, Frame]]:
        """Every request at once (batched together), to their ends: text and finishing frame."""
        self.frames.clear()
        for request_id, inputs in requests.items():
            self.submit(request_id, inputs)
        while self.scheduler.busy:
            self.scheduler.step()
        results = {}
        for request_id in requests:
            frames = [frame for frame in self.frames if frame["id"] == request_id]
            text = "".join(str(frame["text"]) for frame in frames if frame["type"] == "text")
            results[request_id] = (text, frames[-1])
        return results


@contextmanager
def smollm_engine(directory: Path, slots: int) -> Iterator[Engine]:
    path = locate(load_catalog(None, directory).get(SMOLLM).artifact, directory)
    assert path is not None
    ids = sequence_ids(slots)
    model = LlamaModel(str(path), ContextShape(kv_cells=4096, sequences=ids, threads=2))
    prompts = PromptBuilder(model, model.metadata("tokenizer.chat_template"))
    frames: list[Frame] = []
    cache = PrefixCache(model, ids, None, idle_tokens=1024)
    try:
        yield Engine(
            BatchScheduler(model, prompts, slots, 2048, frames.append, lambda _: False, cache), frames
        )
    finally:
        model.close()
