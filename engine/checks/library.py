"""Which llama.cpp build a check loads: a build's bin directory, or the llama_cpp package's own libraries.

llama-cpp-python loads libllama.so from LLAMA_CPP_LIB_PATH, but libllama's RUNPATH names the directory it was
built in, so a copied build/bin would still pull libggml*.so from that build tree. LD_LIBRARY_PATH overrides
RUNPATH; the dynamic loader reads it only when a process starts, so a check re-executes itself with both set.
"""

import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from cli_support import INSTALLED, CheckError

REQUIRED_LIBRARIES = ("libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so")


def installed_lib_dir() -> Path:
    """The lib directory of the llama_cpp package this Python imports (the engine Cirrus runs)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise CheckError("the llama_cpp package is not installed in this Python")
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def resolve_lib_dir(name: str) -> Path:
    """The build directory `name` stands for, checked to hold llama.cpp's libraries."""
    directory = installed_lib_dir() if name == INSTALLED else Path(name)
    if not directory.is_dir():
        raise CheckError(f"library directory {name}: not a directory")
    missing = [lib for lib in REQUIRED_LIBRARIES if not (directory / lib).exists()]
    if missing:
        raise CheckError(
            f"library directory {name}: no {', '.join(missing)} there; give a llama.cpp build's bin "
            f"directory (vendor/llama.cpp/build/bin) or '{INSTALLED}'"
        )
    return directory.resolve()


def library_env(lib_dir: Path, base: Mapping[str, str]) -> dict[str, str]:
    """base, with the variables that make llama-cpp-python and the dynamic loader use lib_dir."""
    return {**base, "LLAMA_CPP_LIB_PATH": str(lib_dir), "LD_LIBRARY_PATH": str(lib_dir)}


def reexec_with(lib_dir: Path) -> None:
    """Returns if this process was started to load lib_dir, else re-executes it so that it does."""
    env = library_env(lib_dir, os.environ)
    if all(os.environ.get(key) == env[key] for key in ("LLAMA_CPP_LIB_PATH", "LD_LIBRARY_PATH")):
        return
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def loaded_paths() -> dict[str, Path]:
    """The file each engine library was mapped from in this process (after `import llama_cpp`)."""
    found: dict[str, Path] = {}
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = Path(line.split(maxsplit=5)[-1].strip())
            for lib in REQUIRED_LIBRARIES:
                if path.name.startswith(lib):
                    found.setdefault(lib, path)
    return found


def verify_loaded(lib_dir: Path) -> None:
    """Fails unless every engine library this process mapped came from lib_dir."""
    loaded = loaded_paths()
    for lib in REQUIRED_LIBRARIES:
        path = loaded.get(lib)
        if path is None or path.parent.resolve() != lib_dir:
            raise CheckError(f"{lib} was loaded from {path}, not from {lib_dir}")
