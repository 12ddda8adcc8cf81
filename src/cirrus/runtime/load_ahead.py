"""What a cold start does while llama.cpp loads the model: llama.cpp's load releases the GIL and takes one core
for 50-80 ms (SmolLM2), so a thread beside it compiles the chat template (2.5 ms of Jinja) and reads the prefix
cache that an earlier instance left on disk: the entries' tokens, then their states, newest first, until the
model is loaded. The main thread takes what is done by then and never waits for the rest: a template not yet
compiled it compiles, an index not yet read it reads, a state not yet read is read when a prompt matches it."""

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from cirrus.runtime.disk_tier import StoredPrefix, read_index, read_state
from cirrus.runtime.prompts import compile_template


@dataclass
class LoadAhead:
    template: str | None
    folder: Path | None
    formatter: Jinja2ChatFormatter | None = None
    stored: list[StoredPrefix] | None = None
    states: dict[Path, bytes] = field(default_factory=dict)
    _loaded: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "LoadAhead":
        self._thread = threading.Thread(target=self._run, name="load-ahead", daemon=True)
        self._thread.start()
        return self

    def model_loaded(self) -> "LoadAhead":
        """Stop reading states, without waiting: what is not done yet (an entry being read, the template on a
        load faster than its compile) the caller does itself, as without this."""
        self._loaded.set()
        return self

    def _run(self) -> None:
        # Whatever fails here is done again, and reported, on the main thread's own path.
        with contextlib.suppress(Exception):
            self._compile()
        with contextlib.suppress(Exception):
            self._read_prefixes()

    def _compile(self) -> None:
        if self.template:
            self.formatter = compile_template(self.template)

    def _read_prefixes(self) -> None:
        if self.folder is None:
            return
        self.stored = read_index(self.folder)
        for entry in sorted(self.stored, key=_modified, reverse=True):
            if self._loaded.is_set():
                return
            state = read_state(entry.path)
            if state is not None:
                self.states[entry.path] = state


def _modified(entry: StoredPrefix) -> float:
    try:
        return entry.path.stat().st_mtime
    except OSError:
        return 0.0
