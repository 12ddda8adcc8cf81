"""The prefix cache over a whole KV cache: every sequence the engine holds, running or finished, is findable by
its longest shared prefix, and a new prompt starts from the best one instead of evaluating those tokens again.

llama.cpp's unified KV cache keeps cells per sequence id, and a cell can belong to several ids, so sharing a prefix
(`llama_memory_seq_cp`) copies nothing. The engine has more sequence ids than it runs sequences at once: the
others hold finished sequences (a conversation's last turn, with its answer) until an id or a cell is needed,
then the least recently used goes, saved to the host tier first when it is worth keeping.

Idle sequences stay few on purpose. Attention in a unified cache spans every cell in use, so each idle cell slows
every decode step a little (measured on SmolLM2: 32 idle conversations of 200 tokens cost 20% of batch-8 decode
speed), while restoring one from host memory costs about a millisecond.
"""

from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cirrus.runtime.disk_tier import read_state
from cirrus.runtime.host_tier import MIN_TOKENS, HostTier, Saved, State
from cirrus.runtime.prefix_index import BLOCK, Match, PrefixIndex

# Idle sequence ids kept beside each running one.
IDLE_PER_RUNNING = 2
# llama.cpp's LLAMA_MAX_SEQ: a context with more sequence ids fails to be created.
MAX_SEQUENCE_IDS = 256


def idle_token_budget(kv_cells: int) -> int:
    """With a host tier, the most tokens idle sequences keep in the KV cache: a sixteenth of it. Every decode step
    attends over them (bench/kv_span.py, SmolLM2: a 700-token conversation decoding alone took 9.2 ms a token with
    no idle cells, 11.4 with 2,048), where moving one to host memory and back costs a few milliseconds a turn."""
    return kv_cells // 16


def sequence_ids(parallel: int) -> int:
    """How many sequence ids a context running `parallel` sequences at once needs."""
    return min(MAX_SEQUENCE_IDS, parallel * (1 + IDLE_PER_RUNNING))


class KvCells(Protocol):
    """The KV cache operations the prefix cache drives (implemented by `runtime.llama.LlamaModel`)."""

    def forget(self, sequence: int, keep: int) -> None: ...

    def share(self, source: int, target: int, length: int) -> None: ...

    def save(self, sequence: int) -> State | None: ...  # None: the engine could not serialise it

    def restore(self, sequence: int, state: State) -> bool: ...


@dataclass(frozen=True)
class Admission:
    slot: int  # the sequence id the new sequence runs in
    reuse: int  # prompt tokens already in its cells
    restored: bool = False  # they came back from the host tier


class PrefixCache:
    def __init__(
        self, cells: KvCells, sequences: int, host: HostTier | None = None, idle_tokens: int | None = None
    ) -> None:
        """`idle_tokens`: with a host tier, the most tokens idle sequences keep in the KV cache; past it the least
        recently used move to the host tier (attention spans every cell in use; a restore costs a copy)."""
        self._cells = cells
        self._idle_tokens = idle_tokens if host is not None else None
        self._index: PrefixIndex[int] = PrefixIndex()
        self._idle: dict[int, None] = {}  # least recently used first
        self._empty = list(range(sequences))
        self._running: set[int] = set()
        self._host = host

    @property
    def idle(self) -> int:
        return len(self._idle)

    def length(self, slot: int) -> int:
        return len(self._index.tokens(slot))

    def tokens(self, slot: int) -> list[int]:
        return self._index.tokens(slot)

    def admit(self, prompt: Sequence[int], salt: Hashable = None) -> Admission:
        """Give prompt a sequence id holding as much of it as any tier has. One prompt token is always left to
        evaluate, for its logits."""
        limit = max(len(prompt) - 1, 0)
        # The state is read before anything moves to the host tier, which could push the entry out of it.
        fetched = self._fetch_from_host(prompt, salt, limit)
        # The idle sequences this prompt will not start from leave before a restore: its cells take theirs.
        source = None if fetched is not None else self._resident_key(prompt, salt, limit)
        self._trim_idle([slot for slot in self._idle if slot != source])
        restored = fetched is not None and self._restore(*fetched)
        resident = self._index.longest(prompt, salt)
        reuse = min(resident.length, limit) if resident is not None else 0
        if resident is None or reuse == 0:
            return self._start(self._vacant(), prompt, salt, 0)
        if resident.key in self._idle and resident.length == self.length(resident.key):
            return self._adopt(resident.key, reuse, restored)
        if resident.key in self._idle:  # shared from: the most recently used now
            self._idle[resident.key] = self._idle.pop(resident.key)
        slot = self._vacant(keep=resident.key)
        self._cells.share(resident.key, slot, reuse)
        # What was shared from can go too, now that its shared cells are the new sequence's as well.
        if resident.key in self._idle and self._idle_over_budget(self._idle):
            self._empty.append(self._evict(resident.key))
        return self._start(slot, prompt, salt, reuse, restored)

    def extend(self, slot: int, tokens: Sequence[int]) -> None:
        self._index.extend(slot, tokens)

    def release(self, slot: int) -> None:
        """A sequence ended: its cells stay, findable, until the id or the cells are needed."""
        self._running.discard(slot)
        if self.length(slot) > 0:
            self._idle[slot] = None
            self._keep_idle_within_budget()
        else:
            self._index.remove(slot)
            self._empty.append(slot)

    def _keep_idle_within_budget(self) -> None:
        """The sequence that just ended stays whole even past the budget: its conversation's next turn is the
        likeliest next prompt."""
        if self._idle_tokens is None:
            return
        held = sum(self.length(slot) for slot in self._idle)
        while held > self._idle_tokens and len(self._idle) > 1:
            oldest = next(iter(self._idle))
            held -= self.length(oldest)
            self._empty.append(self._evict(oldest))

    def save_ahead(self) -> bool:
        """While the engine has nothing to run: save to the host tier the next idle sequence that a prompt
        continuing none of them would move there (`_trim_idle`), and leave it where it is. Its eviction then costs
        no save (the host tier holds its tokens already), and the save is off the next request's path. A prompt
        that continues it still finds it in place. False when nothing is left to save, or a save failed."""
        for slot in self._beyond_budget(list(self._idle)):
            if self._worth_keeping(slot):
                return self._save_to_host(slot)
        return False

    def _trim_idle(self, candidates: list[int]) -> None:
        """The candidates leave the KV cache in their order until those left fit the idle budget, even if only one
        is left: attention over a new sequence would span their cells on every step (bench/kv_span.py)."""
        for slot in self._beyond_budget(candidates):
            self._empty.append(self._evict(slot))

    def _beyond_budget(self, candidates: list[int]) -> Iterator[int]:
        """The candidates, in their order, until those left fit the idle budget."""
        while candidates and self._idle_over_budget(candidates):
            yield candidates.pop(0)

    def _idle_over_budget(self, slots: Iterable[int]) -> bool:
        return self._idle_tokens is not None and sum(self.length(slot) for slot in slots) > self._idle_tokens

    def _resident_key(self, prompt: Sequence[int], salt: Hashable, limit: int) -> int | None:
        """The sequence id whose cells the prompt starts from, if any."""
        resident = self._index.longest(prompt, salt)
        return resident.key if resident is not None and min(resident.length, limit) > 0 else None

    def _host_match(
        self, prompt: Sequence[int], salt: Hashable, limit: int, resident_length: int
    ) -> Match[int] | None:
        """The host tier's entry sharing the longest prefix with prompt, when it holds at least a block more of
        the prompt than the KV cache does."""
        match = self._host.longest(prompt, salt) if self._host is not None else None
        if match is None or min(match.length, limit) < min(resident_length, limit) + BLOCK:
            return None
        return match

    def snapshot(self) -> Iterator[Saved]:
        """What the cache holds beyond its running sequences, most recently used first, within the host tier's
        budget: the idle sequences (saved now), then the host tier's entries. Nothing without a host tier."""
        if self._host is None:
            return
        budget = self._host.capacity_tokens
        for saved in (*self._saved_idle(self._host, budget), *self._host.newest_first()):
            if len(saved.tokens) <= budget:
                budget -= len(saved.tokens)
                yield saved

    def _saved_idle(self, host: HostTier, budget: int) -> Iterator[Saved]:
        """The idle sequences within budget, most recently used first, saved now (any the engine cannot save is
        left out, and so is any the host tier holds already: saved ahead)."""
        for slot in reversed(self._idle):
            tokens, salt = self.tokens(slot), self._index.salt(slot)
            if not (MIN_TOKENS <= len(tokens) <= budget and host.worth_keeping(tokens, salt)):
                continue
            if (state := self._cells.save(slot)) is not None:
                yield Saved(tuple(tokens), salt, state)

    def evict_one(self) -> bool:
        """Free the least recently used idle sequence's cells (the KV cache is full). False if none is idle."""
        if not self._idle:
            return False
        self._empty.append(self._evict(next(iter(self._idle))))
        return True

    # -- admission paths --------------------------------------------------------------------------------------

    def _adopt(self, slot: int, reuse: int, restored: bool) -> Admission:
        """An idle sequence that prompt extends becomes the new sequence, cells and all."""
        del self._idle[slot]
        self._cells.forget(slot, reuse)
        self._index.truncate(slot, reuse)
        self._running.add(slot)
        return Admission(slot, reuse, restored)

    def _fetch_from_host(
        self, prompt: Sequence[int], salt: Hashable, limit: int
    ) -> tuple[int, Saved, State] | None:
        """The host tier's entry sharing the longest prefix with prompt, and its state, when it holds at least a
        block more of the prompt than the KV cache does. An entry that cannot be read is dropped."""
        resident = self._index.longest(prompt, salt)
        match = self._host_match(prompt, salt, limit, resident.length if resident is not None else 0)
        if match is None or self._host is None:
            return None
        saved = self._host.used(match.key)
        state = read_state(saved.state) if isinstance(saved.state, Path) else saved.state
        if state is None:
            self._host.drop(match.key)
            return None
        return match.key, saved, state

    def _restore(self, entry: int, saved: Saved, state: State) -> bool:
        """Bring a host entry back into the KV cache, whole, as an idle sequence. One that does not fit even once
        every idle sequence is gone is dropped."""
        slot = self._vacant()
        if not self._restore_into(slot, state):
            self._empty.append(slot)
            if self._host is not None:
                self._host.drop(entry)
            return False
        self._index.put(slot, saved.tokens, saved.salt)
        self._idle[slot] = None
        return True

    def _restore_into(self, slot: int, state: State) -> bool:
        while not self._cells.restore(slot, state):
            self._cells.forget(slot, 0)  # llama.cpp may leave cells behind when a state fails half-read
            if not self._idle:
                return False
            self._empty.append(self._evict(next(iter(self._idle))))
        return True

    def _start(
        self, slot: int, prompt: Sequence[int], salt: Hashable, reuse: int, restored: bool = False
    ) -> Admission:
        self._index.put(slot, prompt[:reuse], salt)
        self._running.add(slot)
        return Admission(slot, reuse, restored)

    def _vacant(self, keep: int | None = None) -> int:
        """An id holding nothing: an empty one, else the least recently used idle one (not `keep`), evicted."""
        if self._empty:
            return self._empty.pop()
        victim = next(slot for slot in self._idle if slot != keep)
        return self._evict(victim)

    def _evict(self, slot: int) -> int:
        """Drop an idle sequence's cells, saving them to the host tier first when that tier would keep them."""
        del self._idle[slot]
        if self._worth_keeping(slot):
            self._save_to_host(slot)
        self._cells.forget(slot, 0)
        self._index.remove(slot)
        return slot

    def _worth_keeping(self, slot: int) -> bool:
        """The host tier would keep this sequence (it has no host tier: no)."""
        return self._host is not None and self._host.worth_keeping(self.tokens(slot), self._index.salt(slot))

    def _save_to_host(self, slot: int) -> bool:
        """Save a sequence's cells to the host tier, the sequence staying where it is; False if the engine could
        not."""
        if self._host is None or (state := self._cells.save(slot)) is None:
            return False
        self._host.put(self.tokens(slot), self._index.salt(slot), state)
        return True
