"""Which machine and when: stamped on every report so its figures can be compared later."""

import os
import platform
from datetime import UTC, datetime
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_summary() -> dict[str, str | int]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 0,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
