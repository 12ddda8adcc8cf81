"""Run one probe (`cirrus.evals.probe`) in a fresh process and return its measurements."""

import json
import subprocess
import sys
from typing import Any

from cirrus.evals.errors import EvalError

PROBE_TIMEOUT_S = 1800.0


def run_probe(request: dict[str, Any], timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "cirrus.evals.probe"],
            input=json.dumps(request).encode("utf-8"),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise EvalError(
            f"{request['model']}: the {request['task']} probe ran past {timeout_s:.0f}s"
        ) from None
    lines = done.stdout.decode("utf-8", errors="replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.decode("utf-8", errors="replace").strip().splitlines()[-3:]
        raise EvalError(
            f"{request['model']}: the {request['task']} probe exited with status {done.returncode}"
            + (f": {' | '.join(tail)}" if tail else "")
        )
    result: dict[str, Any] = json.loads(lines[-1])
    if "error" in result:
        raise EvalError(f"{request['model']}: {result['error']}")
    return result
