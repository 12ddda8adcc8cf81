"""Quantized variants of a GGUF, made with llama.cpp's own quantizer, for evaluations and their tests.

`cirrus pack` is the user-facing way to quantize; this is the minimum the quality table needs:
`python -m cirrus.evals.variants SOURCE.gguf OUT_DIR F16 Q8_0 Q4_K_M ...` writes OUT_DIR/<TYPE>.gguf, the
F16 first (from SOURCE, requantizing if SOURCE is already quantized) and every other type from that F16.
"""

import ctypes
import sys
from pathlib import Path

from cirrus.evals.errors import EvalError


def quantize(
    source: Path, target: Path, type_name: str, allow_requantize: bool = False, threads: int = 2
) -> Path:
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{type_name.upper()}", None)
    if ftype is None:
        raise EvalError(f"unknown quantization type {type_name!r}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread, params.allow_requantize = ftype, threads, allow_requantize
    partial = target.with_suffix(".partial")
    status = llama_cpp.llama_model_quantize(
        str(source).encode("utf-8"), str(partial).encode("utf-8"), ctypes.byref(params)
    )
    if status != 0:
        partial.unlink(missing_ok=True)
        raise EvalError(f"llama.cpp could not quantize {source} to {type_name} (status {status})")
    partial.rename(target)
    return target


def make_variants(source: Path, out_dir: Path, types: list[str]) -> dict[str, Path]:
    """OUT_DIR/F16.gguf from source, then each other type from that F16; existing files are kept."""
    out_dir.mkdir(parents=True, exist_ok=True)
    reference = out_dir / "F16.gguf"
    if not reference.is_file():
        quantize(source, reference, "F16", allow_requantize=True)
    made = {"F16": reference}
    for name in (t.upper() for t in types if t.upper() != "F16"):
        target = out_dir / f"{name}.gguf"
        made[name] = target if target.is_file() else quantize(reference, target, name)
    return made


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: python -m cirrus.evals.variants SOURCE.gguf OUT_DIR TYPE...", file=sys.stderr)
        return 2
    try:
        for name, path in make_variants(Path(argv[0]), Path(argv[1]), argv[2:]).items():
            print(f"{name:8} {path}  {path.stat().st_size:,} bytes")
    except EvalError as exc:
        print(f"cirrus: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
