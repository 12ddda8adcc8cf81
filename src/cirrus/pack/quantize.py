"""Quantize a GGUF with llama.cpp's own `llama_model_quantize`, and say why when it refuses."""

import ctypes
import threading
from pathlib import Path
from typing import Any

import llama_cpp

from cirrus.pack.errors import PackError
from cirrus.pack.quants import Quant

LOG_ERROR = 4  # ggml_log_level GGML_LOG_LEVEL_ERROR
FAILED_PREFIX = "failed to quantize: "


class _LlamaLog:
    """Keeps llama.cpp's log quiet and remembers its error lines (the log is per process)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._callback = llama_cpp.llama_log_callback(self._receive)  # referenced: C keeps only a pointer
        llama_cpp.llama_log_set(self._callback, ctypes.c_void_p(0))

    def _receive(self, level: int, text: bytes, _user: Any) -> None:
        if level == LOG_ERROR:
            with self._lock:
                self.errors.append(text.decode("utf-8", errors="replace").strip())

    def take_errors(self) -> list[str]:
        with self._lock:
            errors, self.errors = self.errors, []
        return errors


_log: _LlamaLog | None = None


def _llama_log() -> _LlamaLog:
    global _log
    if _log is None:
        _log = _LlamaLog()
        llama_cpp.llama_backend_init()
    return _log


def quantize(
    source: Path, output: Path, target: Quant, *, what: str, allow_requantize: bool, threads: int
) -> None:
    """Write `source` quantized to `target` at `output`; on failure raise PackError naming `what` and
    llama.cpp's reason."""
    log = _llama_log()
    log.take_errors()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = target.ftype
    params.allow_requantize = allow_requantize
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(output).encode(), ctypes.byref(params))
    if status != 0:
        raise PackError(f"llama.cpp could not quantize {what} to {target.name}: {_reason(log.take_errors())}")


def _reason(errors: list[str]) -> str:
    for line in reversed(errors):
        if FAILED_PREFIX in line:
            return line.split(FAILED_PREFIX, 1)[1].strip()
    return errors[-1] if errors else "it gave no reason"
