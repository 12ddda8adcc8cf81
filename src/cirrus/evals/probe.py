"""The engine side of an evaluation: one model, in its own process, so its load time and peak memory are its own.

Run as `python -m cirrus.evals.probe`: reads one JSON request on stdin, writes one JSON line on stdout, either
the measurements or {"error": "..."}. The parent (`cirrus.evals.runner`) never imports llama.cpp.
"""

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cirrus.evals.stats import kl_divergence, log_softmax

Request = dict[str, Any]
ROWS_PER_STEP = 64  # log-softmax this many positions at a time, so float64 copies stay small


class ProbeError(RuntimeError):
    pass


def peak_rss_bytes() -> int:
    """The process's resident high-water mark (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _open(request: Request, **options: Any) -> tuple[Any, float]:
    import llama_cpp

    threads = int(request.get("threads", 2))
    started = time.perf_counter()
    try:
        llm = llama_cpp.Llama(
            model_path=request["model"],
            n_ctx=int(request["n_ctx"]),
            n_batch=min(512, int(request["n_ctx"])),
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
            **options,
        )
    except ValueError as exc:
        raise ProbeError(f"llama.cpp could not load {request['model']}: {exc}") from None
    return llm, time.perf_counter() - started


def _tokens(llm: Any, text: str, count: int) -> list[int]:
    tokens: list[int] = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    if not tokens:
        raise ProbeError("the corpus produced no tokens")
    while len(tokens) < count:  # a short corpus repeats, so a long context can still be filled
        tokens = tokens + tokens
    return tokens[:count]


def _timed_generation(llm: Any, prompt: list[int], decode: int) -> dict[str, float]:
    llm.reset()  # no prompt prefix reused from an earlier run
    started = time.perf_counter()
    stamps: list[float] = []
    for _ in llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
        stamps.append(time.perf_counter())
        if len(stamps) > decode:
            break
    ttft = stamps[0] - started
    decode_s = stamps[-1] - stamps[0]
    return {
        "ttft_s": ttft,
        "prompt_tps": len(prompt) / ttft,
        "decode_tps": (len(stamps) - 1) / decode_s if decode_s > 0 else float("nan"),
    }


def _best_of(llm: Any, prompt: list[int], decode: int, runs: int) -> dict[str, float]:
    """The fastest of several runs: on a shared machine the slower ones measure the neighbours."""
    results = [_timed_generation(llm, prompt, decode) for _ in range(max(1, runs))]
    best = min(results, key=lambda r: r["ttft_s"])
    return {**best, "decode_tps": max(r["decode_tps"] for r in results)}


def speed(request: Request) -> dict[str, Any]:
    """Load time, prompt and decode rates, and the peak memory of loading and generating."""
    llm, load_s = _open(request)
    n_ctx, decode = int(request["n_ctx"]), int(request["decode_tokens"])
    prompt = _tokens(llm, request["text"], int(request.get("prompt_tokens") or n_ctx // 2))
    prompt = prompt[: max(1, n_ctx - decode - 1)]
    timed = _best_of(llm, prompt, decode, int(request.get("runs", 1)))
    result = {"load_s": load_s, **timed, "prompt_tokens": len(prompt)}
    result["peak_rss_bytes"] = peak_rss_bytes()
    result["n_vocab"] = llm.n_vocab()
    llm.close()
    return result


def _windows(llm: Any, tokens: list[int], n_ctx: int) -> list[list[int]]:
    bos = llm.token_bos()
    prefix = [bos] if bos >= 0 else []
    step = n_ctx - len(prefix)
    windows = [prefix + tokens[i : i + step] for i in range(0, len(tokens), step)]
    return [w for w in windows if len(w) >= 2]


def _window_logits(llm: Any, window: list[int]) -> Any:
    llm.reset()
    llm.eval(window)
    return llm.scores[: len(window) - 1]


def _score(request: Request, visit: Callable[[np.ndarray, np.ndarray], None]) -> dict[str, Any]:
    """Evaluate the corpus window by window, handing each block of log-probabilities and targets to visit."""
    llm, _ = _open(request, logits_all=True)
    tokens = _tokens(llm, request["text"], int(request["tokens"]))
    if request.get("expected_tokens") is not None and tokens != request["expected_tokens"]:
        raise ProbeError(
            "its tokenizer differs from the reference's, so their predictions cannot be compared"
        )
    target_logprobs: list[float] = []
    for window in _windows(llm, tokens, int(request["n_ctx"])):
        logits = _window_logits(llm, window)
        targets = np.asarray(window[1:])
        for start in range(0, len(targets), ROWS_PER_STEP):
            logprobs = log_softmax(logits[start : start + ROWS_PER_STEP])
            rows = targets[start : start + ROWS_PER_STEP]
            target_logprobs.extend(logprobs[np.arange(len(rows)), rows].tolist())
            visit(logprobs, rows)
    n_vocab = llm.n_vocab()
    llm.close()
    return {"tokens": tokens, "target_logprobs": target_logprobs, "n_vocab": n_vocab}


def reference_scores(request: Request) -> dict[str, Any]:
    """Perplexity inputs, and every position's log-probabilities written to a float32 file for the candidates."""
    blocks: list[np.ndarray] = []
    store = Path(request["logprobs_file"])
    with store.open("wb") as out:

        def keep(logprobs: np.ndarray, _targets: np.ndarray) -> None:
            out.write(logprobs.astype(np.float32).tobytes())
            blocks.append(logprobs.argmax(axis=-1))

        result = _score(request, keep)
    result["top1"] = np.concatenate(blocks).tolist()
    return result


def candidate_scores(request: Request) -> dict[str, Any]:
    """Perplexity inputs, plus KL against the reference and top-1 agreement at every position."""
    n_vocab, position = int(request["n_vocab"]), 0
    reference = np.memmap(request["logprobs_file"], dtype=np.float32, mode="r").reshape(-1, n_vocab)
    kl: list[float] = []
    top1: list[int] = []

    def compare(logprobs: np.ndarray, _targets: np.ndarray) -> None:
        nonlocal position
        if logprobs.shape[1] != n_vocab:
            raise ProbeError(f"its vocabulary has {logprobs.shape[1]} tokens, the reference's {n_vocab}")
        rows = np.asarray(reference[position : position + len(logprobs)], dtype=np.float64)
        kl.extend(kl_divergence(rows, logprobs).tolist())
        top1.extend(logprobs.argmax(axis=-1).tolist())
        position += len(logprobs)

    result = _score(request, compare)
    return {**result, "kl": kl, "top1": top1}


def embeddings(request: Request) -> dict[str, Any]:
    """Normalised sentence embeddings (written to a .npy file), load time, rate and peak memory."""
    llm, load_s = _open(request, embedding=True)
    texts: list[str] = request["sentences"]
    count = sum(len(llm.tokenize(t.encode("utf-8"), add_bos=True)) for t in texts)
    llm.embed(texts[0])  # the first call pays one-time set-up; keep it out of the rate
    started = time.perf_counter()
    vectors = np.asarray([llm.embed(t, normalize=True) for t in texts], dtype=np.float64)
    elapsed = time.perf_counter() - started
    np.save(request["embeddings_file"], vectors)
    result = {"load_s": load_s, "prompt_tps": count / elapsed, "peak_rss_bytes": peak_rss_bytes()}
    llm.close()
    return result


TASKS: dict[str, Callable[[Request], dict[str, Any]]] = {
    "speed": speed,
    "reference": reference_scores,
    "candidate": candidate_scores,
    "embeddings": embeddings,
}


def main() -> int:
    request: Request = json.loads(sys.stdin.read())
    try:
        result = TASKS[request["task"]](request)
    except ProbeError as exc:
        result = {"error": str(exc)}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: llama.cpp's finalisers add nothing here


if __name__ == "__main__":
    sys.exit(main())
