"""One BLAS thread for vector search in this process.

The gateway shares its cores with llama.cpp workers whose threads spin after each batch. numpy's OpenBLAS runs a
matrix product on a thread per core, and those threads and the workers' fight over the cores: a search of 1 ms
alone took up to 120 ms right after an embedding (bench/RESULTS.md, issue 17). So the process's BLAS keeps one
thread, set when the first instance's vectors are stacked: that happens only where an embedded index searches
(a gateway, or a program that opened one itself), never on `import cirrus`.
"""

import functools

from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]


@functools.cache
def one_blas_thread() -> None:
    """Idempotent; the limit lasts for the process (threadpoolctl restores it only when asked)."""
    threadpool_limits(limits=1, user_api="blas")
