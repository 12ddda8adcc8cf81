"""The peers the benchmarks measure Cirrus against, each started on 127.0.0.1 and stopped afterwards:
llama-cpp-python's own server, and llama.cpp's own C++ `llama-server`, built once per machine from the vendored
llama.cpp of the same llama-cpp-python sdist, stock (no engine/patches applied).
"""

import contextlib
import fcntl
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO

import httpx

from bench.core import SERVER_START_TIMEOUT_S, Config, free_port, stop_server

ROOT = Path(__file__).resolve().parents[1]
BOOTSTRAP = ROOT / "scripts" / "bootstrap.sh"
BUILD_JOBS = 2
DOWNLOAD_TIMEOUT_S = 600.0
CONFIGURE_TIMEOUT_S = 600.0
BUILD_TIMEOUT_S = 3600.0

# llama-server's slots and KV cells, as Cirrus's default model has them (parallel 8, kv_cache_tokens 8192 shared
# by its sequences: hence one unified KV buffer rather than 8 slots of 1024 cells each). Prompt caching stays at
# llama-server's defaults: each slot reuses its cached prefix, --cache-ram 8192 MiB keeps idle slots' prompts in
# host memory, --cache-reuse 0 (no KV shifting of reordered chunks).
LLAMA_SERVER_SLOTS = 8
LLAMA_SERVER_CONTEXT = 8192
READY_POLL_S = 0.1


def peer_cache() -> Path:
    return Path(os.environ.get("CIRRUS_PEER_CACHE", Path.home() / ".cache" / "cirrus" / "peers"))


def progress(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


# -- building llama-server ---------------------------------------------------------------------------------------


def bootstrap_setting(name: str, text: str | None = None) -> str:
    """A NAME=value (or NAME="value") line of scripts/bootstrap.sh: the engine's version and build flags live there."""
    script = BOOTSTRAP.read_text() if text is None else text
    found = re.search(rf'^{name}="?([^"\n]*)"?$', script, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{BOOTSTRAP} sets no {name}")
    return found.group(1)


def cmake_args(no_amx: str) -> list[str]:
    # The prebuilt web UI is fetched from a hub at build time: off, as is TLS, which a server on 127.0.0.1 needs not.
    return [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DGGML_NATIVE=ON",
        f"-DCMAKE_C_FLAGS={no_amx}",
        f"-DCMAKE_CXX_FLAGS={no_amx}",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary, movable into the cache
    ]


def build_key(version: str, args: list[str], machine: str) -> str:
    return hashlib.sha256("|".join([version, *args, machine]).encode()).hexdigest()[:12]


def build_folder(version: str, args: list[str]) -> Path:
    return peer_cache() / f"llama-server-{version}-{build_key(version, args, platform.machine())}"


def cmake_program() -> str:
    found = shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))
    if found is None:
        raise RuntimeError(
            "building llama-server needs cmake (and a C++ compiler): install it with your package manager, or "
            f"with `{sys.executable} -m pip install cmake`"
        )
    return found


def llama_server_binary() -> Path:
    """The stock llama-server for this machine, built the first time (about 10 minutes on 2 cores)."""
    version, args = bootstrap_setting("LLAMA_VERSION"), cmake_args(bootstrap_setting("NO_AMX"))
    folder = build_folder(version, args)
    binary = folder / "llama-server"
    if binary.exists():
        return binary
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run building it: wait, then take its binary
        if not binary.exists():
            build_llama_server(version, args, folder)
    return binary


def build_llama_server(version: str, args: list[str], folder: Path) -> None:
    """Build in a temporary folder beside the cache and rename the result into place, so a broken build leaves
    nothing that looks finished."""
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=folder.parent))
    try:
        source = vendored_llama_cpp(version, work)
        built = compile_llama_server(source, args, work)
        result = work / "result"
        result.mkdir()
        shutil.copy2(built, result / "llama-server")
        (result / "build-info.txt").write_text(
            f"llama-cpp-python {version} sdist, vendored llama.cpp, stock\ncmake {' '.join(args)}\n"
        )
        os.rename(result, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"llama-server built in {time.monotonic() - started:.0f} s: {folder / 'llama-server'}")


def vendored_llama_cpp(version: str, work: Path) -> Path:
    progress(f"downloading the llama-cpp-python {version} sdist for its vendored llama.cpp")
    download = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "download", "--no-deps"]
    download += ["--no-binary", ":all:", "-d", str(work), f"llama-cpp-python=={version}"]
    subprocess.run(download, check=True, timeout=DOWNLOAD_TIMEOUT_S)
    with tarfile.open(work / f"llama_cpp_python-{version}.tar.gz") as archive:
        archive.extractall(work, filter="data")
    return work / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"


def compile_llama_server(source: Path, args: list[str], work: Path) -> Path:
    cmake, build, log_path = cmake_program(), work / "build", peer_cache() / "llama-server-build.log"
    progress(f"building llama-server with {BUILD_JOBS} jobs, once for this machine (log: {log_path})")
    with log_path.open("w") as log:
        run_logged([cmake, "-S", str(source), "-B", str(build), *args], log, CONFIGURE_TIMEOUT_S)
        progress("configured; compiling (about 10 minutes on 2 cores)")
        build_command = [cmake, "--build", str(build), "--config", "Release", "--target", "llama-server"]
        run_logged([*build_command, "-j", str(BUILD_JOBS)], log, BUILD_TIMEOUT_S)
    return build / "bin" / "llama-server"


def run_logged(command: list[str], log: IO[str], timeout_s: float) -> None:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    try:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=timeout_s)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        tail = Path(log.name).read_text().splitlines()[-30:]
        raise RuntimeError(
            f"{command[:3]} failed ({error}); end of {log.name}:\n" + "\n".join(tail)
        ) from error


# -- starting the peers ------------------------------------------------------------------------------------------


def wait_up(url: str, server: subprocess.Popen[bytes], poll_s: float) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    with httpx.Client(timeout=5) as client:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise RuntimeError(f"{server.args!r} exited with code {server.returncode}")
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(poll_s)
    raise TimeoutError(f"{url} did not answer in {SERVER_START_TIMEOUT_S} s")


@contextlib.contextmanager
def launched(
    command: list[str], ready_path: str, port: int, log: IO[str], poll_s: float = READY_POLL_S
) -> Iterator[tuple[str, float]]:
    """Run a server command listening on 127.0.0.1:port; once ready_path answers 200, yield its base URL and the
    time.perf_counter() at which its process was spawned."""
    spawned_at = time.perf_counter()
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_up(f"{url}{ready_path}", server, poll_s)
        yield url, spawned_at
    finally:
        stop_server(server)


@contextlib.contextmanager
def started(command: list[str], ready_path: str, port: int, log: IO[str]) -> Iterator[str]:
    with launched(command, ready_path, port, log) as (url, _):
        yield url


def peer_command(config: Config, port: int | str) -> list[str]:
    threads = str(config.threads)
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(config.path), "--host", "127.0.0.1",
        "--port", str(port), "--n_ctx", str(config.spec.context_window), "--n_threads", threads,
        "--n_threads_batch", threads, "--interrupt_requests", "False", "--flash_attn", "True",
        "--logits_all", "False", "--verbose", "False",
    ]  # fmt: skip


@contextlib.contextmanager
def peer_server(config: Config, log: IO[str]) -> Iterator[str]:
    """llama-cpp-python's server."""
    port = free_port()
    with started(peer_command(config, port), "/v1/models", port, log) as url:
        yield url


def llama_server_command(binary: Path, config: Config, port: int | str) -> list[str]:
    return [
        str(binary), "-m", str(config.path), "--host", "127.0.0.1", "--port", str(port),
        "-np", str(LLAMA_SERVER_SLOTS), "-c", str(LLAMA_SERVER_CONTEXT), "--kv-unified",
        "-t", str(config.threads), "--no-webui",
    ]  # fmt: skip


@contextlib.contextmanager
def llama_server(config: Config, log: IO[str]) -> Iterator[str]:
    """llama.cpp's own server (building it first if this machine has none)."""
    with llama_server_launched(config, log, READY_POLL_S) as (url, _):
        yield url


@contextlib.contextmanager
def llama_server_launched(config: Config, log: IO[str], poll_s: float) -> Iterator[tuple[str, float]]:
    """llama-server spawned now: its base URL once /health answers 200 (polled every poll_s), and the
    time.perf_counter() of the spawn."""
    binary, port = llama_server_binary(), free_port()
    with launched(llama_server_command(binary, config, port), "/health", port, log, poll_s) as ready:
        yield ready
