"""The engine side of logits.py: evaluates fixed token sequences and collects every logits row.

Import this only after library.reexec_with: importing llama_cpp loads the engine's libraries.
"""

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt
from batches import BatchSession, Entry, Logits, random_tokens, sequence_entries

# From 16 rows on, multiples of 4: stock's repacked matmuls (Gemma's Q4_K) compute a batch's last (rows mod 4) rows
# with another kernel than the rows before them, so those rows' bits depend on the batch's length in stock already.
PROMPT_LENGTHS = (1, 5, 15, 16, 32, 60, 64, 200)
HISTORY = 300
CONTINUATIONS = (16, 32, 48, 60)
TILE_ROWS = 64
IN_TILE = "_in64"
SEQUENCE_COUNTS = (1, 2, 3, 4, 5, 7, 8, 13, 16)
DECODE_STEPS = 3
GREEDY_PROMPTS = 8
GREEDY_TOKENS = 64
SEED = 1234

Arrays = dict[str, npt.NDArray[np.generic]]


def logits_arrays(session: BatchSession, greedy: bool) -> Arrays:
    """Every array of a dump. The draws from one seeded generator make every build see the same tokens."""
    rng = np.random.RandomState(SEED)
    arrays: Arrays = {
        **prompt_logits(session, rng),
        **continuation_logits(session, rng),
        **sequence_logits(session, rng),
    }
    if greedy:
        alone, batched = greedy_alone_and_batched(session, rng)
        arrays["greedy_alone"] = np.array(alone, dtype=np.int32)
        arrays["greedy_batched"] = np.array(batched, dtype=np.int32)
        same = [a == b for a, b in zip(alone, batched, strict=True)]
        print(f"greedy {GREEDY_TOKENS} tokens, {len(alone)} prompts: alone == batched per sequence: {same}")
    return arrays


def prompt_logits(session: BatchSession, rng: np.random.RandomState) -> Arrays:
    """One sequence per prompt length; logits of every position. A prompt shorter than a tile is also evaluated
    as the first rows of a 64-row batch (IN_TILE)."""
    arrays: Arrays = {}
    for length in PROMPT_LENGTHS:
        prompt = random_tokens(rng, length, session.n_vocab)
        arrays[f"prompt_{length}"] = rows_of(session, [], prompt, [])
        if length < TILE_ROWS:
            padding = random_tokens(rng, TILE_ROWS - length, session.n_vocab)
            arrays[f"prompt_{length}{IN_TILE}"] = rows_of(session, [], prompt, padding)
    return arrays


def continuation_logits(session: BatchSession, rng: np.random.RandomState) -> Arrays:
    """A later turn: new tokens of one sequence over a cached history, alone and as the first rows of a
    64-row batch (IN_TILE)."""
    arrays: Arrays = {}
    history = random_tokens(rng, HISTORY, session.n_vocab)
    for count in CONTINUATIONS:
        new = random_tokens(rng, count, session.n_vocab)
        padding = random_tokens(rng, TILE_ROWS - count, session.n_vocab)
        arrays[f"continue{HISTORY}_{count}"] = rows_of(session, history, new, [])
        arrays[f"continue{HISTORY}_{count}{IN_TILE}"] = rows_of(session, history, new, padding)
    return arrays


def rows_of(
    session: BatchSession, history: Sequence[int], new: Sequence[int], padding: Sequence[int]
) -> Logits:
    """The logits rows of `new` in sequence 0, evaluated in one batch after `history` and followed in that batch
    by `padding` (whose rows are dropped)."""
    session.clear()
    if history:
        session.run(sequence_entries([history], every_position=False))
    batch = [
        Entry(token, len(history) + pos, 0, pos < len(new)) for pos, token in enumerate([*new, *padding])
    ]
    return session.decode(batch)


def sequence_logits(session: BatchSession, rng: np.random.RandomState) -> Arrays:
    """For each sequence count: all prompts in one batch (every position), then a few greedy decode steps."""
    arrays: Arrays = {}
    for count in SEQUENCE_COUNTS:
        session.clear()
        prompts = [random_tokens(rng, 6 + 3 * seq, session.n_vocab) for seq in range(count)]
        rows = session.decode(sequence_entries(prompts, every_position=True))
        arrays[f"seqs{count}_prompt"] = rows
        last_positions = np.cumsum([len(prompt) for prompt in prompts]) - 1
        steps = greedy_steps(session, prompts, rows[last_positions], DECODE_STEPS)
        for step, (_, step_rows) in enumerate(steps):
            arrays[f"seqs{count}_step{step}"] = step_rows
    return arrays


def greedy_alone_and_batched(
    session: BatchSession, rng: np.random.RandomState
) -> tuple[list[list[int]], list[list[int]]]:
    """The tokens greedy decoding picks for each prompt decoded alone, and for all prompts in one batch."""
    # under 16 tokens: a prompt evaluated alone takes the same attention kernel in stock and patched builds (0005)
    prompts = [random_tokens(rng, 5 + seq, session.n_vocab) for seq in range(GREEDY_PROMPTS)]
    alone = [greedy_continuations(session, [prompt])[0] for prompt in prompts]
    return alone, greedy_continuations(session, prompts)


def greedy_continuations(session: BatchSession, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
    session.clear()
    rows = session.decode(sequence_entries(prompts, every_position=False))
    tokens: list[list[int]] = [[] for _ in prompts]
    for chosen, _ in greedy_steps(session, prompts, rows, GREEDY_TOKENS):
        for generated, token in zip(tokens, chosen, strict=True):
            generated.append(token)
    return tokens


def greedy_steps(
    session: BatchSession, prompts: Sequence[Sequence[int]], rows: Logits, steps: int
) -> Iterator[tuple[list[int], Logits]]:
    """Decode steps of one token per sequence, each the argmax of its sequence's last logits row; yields the
    tokens chosen and the logits rows they produce."""
    for step in range(steps):
        chosen = [int(row.argmax()) for row in rows]
        rows = session.decode(
            [Entry(token, len(prompts[seq]) + step, seq, True) for seq, token in enumerate(chosen)]
        )
        yield chosen, rows
