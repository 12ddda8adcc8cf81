"""The embeddings engine's steps (runtime/encoder.py) over a fake model: each encoded batch counts as progress for
the watchdog, and cancelled requests are confirmed between batches rather than when they reach the front."""

from collections.abc import Callable
from typing import cast

from cirrus.runtime.encoder import EmbeddingEngine
from cirrus.runtime.frames import Frame
from cirrus.runtime.llama import LlamaModel

MAX_TEXT_TOKENS = 4
FOUR_WORDS = "one two three four"  # one token per word: a text fills a batch


class FakeModel:
    """What the encoder uses of LlamaModel: one token per word, every vector the same."""

    pooled = True

    def __init__(self) -> None:
        self.decodes = 0
        self.during_decode: Callable[[], None] = lambda: None

    def tokenize(self, text: str, add_special: bool) -> list[int]:
        return [1] * len(text.split())

    def clear(self) -> None:
        pass

    def decode(self, entries: list[tuple[int, int, int, bool]]) -> int:
        self.decodes += 1
        self.during_decode()
        return 0

    def sequence_embedding(self, sequence: int) -> list[float]:
        return [3.0, 4.0]

    def set_threads(self, threads: int) -> None:
        pass


class Harness:
    def __init__(self) -> None:
        self.model = FakeModel()
        self.sent: list[Frame] = []
        self.cancelled: set[str] = set()
        self.batches = 0
        self.engine = EmbeddingEngine(
            cast(LlamaModel, self.model),
            MAX_TEXT_TOKENS,
            self.sent.append,
            self.cancelled.__contains__,
            self._progressed,
        )

    def _progressed(self) -> None:
        self.batches += 1

    def submit(self, request_id: str, texts: int) -> None:
        self.engine.submit({"type": "embed", "id": request_id, "input": {"texts": [FOUR_WORDS] * texts}})

    def endings(self) -> list[tuple[str, str]]:
        return [
            (str(f["id"]), str(f.get("finish_reason", f["type"])))
            for f in self.sent
            if f["type"] != "started"
        ]


def test_every_encoded_batch_counts_as_progress() -> None:
    """One request of many texts is one engine step; the watchdog must see it advance batch by batch."""
    harness = Harness()
    harness.submit("big", texts=3)
    harness.engine.step()
    assert harness.model.decodes == 3 and harness.batches == 3
    assert harness.endings() == [("big", "embedded")]
    assert harness.sent[-1]["vectors"] == [[0.6, 0.8]] * 3


def test_a_cancelled_request_waiting_behind_another_is_confirmed_without_waiting_its_turn() -> None:
    harness = Harness()
    harness.submit("first", texts=2)
    harness.submit("second", texts=1)
    harness.submit("gone", texts=1)
    harness.cancelled.add("gone")
    harness.engine.step()
    assert harness.endings() == [("gone", "cancelled"), ("first", "embedded")]
    harness.engine.step()
    assert harness.endings()[-1] == ("second", "embedded") and not harness.engine.busy


def test_a_cancel_that_arrives_during_a_long_request_is_confirmed_at_the_next_batch() -> None:
    harness = Harness()
    harness.submit("first", texts=3)
    harness.submit("queued", texts=1)
    harness.model.during_decode = lambda: harness.cancelled.add("queued")
    harness.engine.step()
    assert harness.endings() == [("queued", "cancelled"), ("first", "embedded")]


def test_a_request_cancelled_while_it_is_encoded_stops_and_reports_what_was_read() -> None:
    harness = Harness()
    harness.submit("big", texts=3)
    harness.model.during_decode = lambda: harness.cancelled.add("big")
    harness.engine.step()
    assert harness.model.decodes == 1, "the remaining batches are not encoded"
    assert harness.sent == [
        {"type": "started", "id": "big", "prompt_tokens": MAX_TEXT_TOKENS},
        {"type": "finished", "id": "big", "finish_reason": "cancelled", "prompt_tokens": MAX_TEXT_TOKENS},
    ]


def test_a_long_request_reports_what_it_has_read_after_each_batch_but_the_last() -> None:
    """So a request the server stops waiting for is still billed for what the worker read."""
    harness = Harness()
    harness.submit("big", texts=3)
    harness.submit("small", texts=1)
    harness.engine.step()
    harness.engine.step()
    progress = [(f["id"], f["prompt_tokens"]) for f in harness.sent if f["type"] == "started"]
    assert progress == [("big", MAX_TEXT_TOKENS), ("big", 2 * MAX_TEXT_TOKENS)]
    assert harness.endings() == [("big", "embedded"), ("small", "embedded")]
