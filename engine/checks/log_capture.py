"""Records llama.cpp's log (level and text of every line) so that two builds' logs can be compared.

Import this only after library.reexec_with: importing llama_cpp loads the engine's libraries.
"""

import ctypes
import re

import llama_cpp

TIMING = re.compile(r"\btime\b|\bms\b|\bt/s\b|seconds")
NUMBER = re.compile(r"\d+(\.\d+)?")

LogLine = list[int | str | None]  # [level, text]: a list, as it comes back from JSON


def mask_timings(text: str) -> str:
    """text with its numbers replaced by # if it reports a duration, which differs from run to run."""
    return NUMBER.sub("#", text) if TIMING.search(text) else text


class LogCapture:
    """Installs itself as llama.cpp's log callback; take() returns and forgets what was logged since."""

    def __init__(self) -> None:
        self.messages: list[tuple[int, str]] = []
        self.callback = llama_cpp.llama_log_callback(self.record)  # kept here: C holds only a pointer
        llama_cpp.llama_log_set(self.callback, ctypes.c_void_p(0))

    def record(self, level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        self.messages.append((int(level), mask_timings(text.decode("utf-8", errors="replace"))))

    def take(self) -> list[LogLine]:
        """The messages joined into lines as a log file shows them, each line with its first piece's level."""
        lines: list[LogLine] = []
        current = ""
        level: int | None = None  # of the line being assembled; None while none is begun
        for piece_level, text in self.messages:
            if level is None:
                level = piece_level
            current += text
            while "\n" in current:
                line, current = current.split("\n", 1)
                lines.append([level, line])
                level = piece_level if current else None
        if current:
            lines.append([level, current])
        self.messages = []
        return lines
