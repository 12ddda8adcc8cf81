"""What `cirrus pack` prints: a table for people, JSON for programs."""

import json
from typing import Any

from cirrus.pack.pipeline import Packed

MIB = 1024 * 1024


def as_json(packed: list[Packed]) -> str:
    variants: list[dict[str, Any]] = [
        {**item.manifest.model_dump(mode="json"), "manifest_path": str(item.manifest_path)} for item in packed
    ]
    return json.dumps({"variants": variants}, indent=2)


def as_table(packed: list[Packed]) -> str:
    first = packed[0].manifest
    source = first.source
    requantized = ", already quantized: requantized" if source.requantized else ""
    lines = [
        f"packed {first.model_id} ({first.task}, {first.architecture}) from {source.kind} {source.path} "
        f"({source.quantization}{requantized})",
        f"{'QUANT':8} {'SIZE':>10} {'MEMORY':>10} {'CONTEXT':>8}  DIGEST",
    ]
    for item in packed:
        m = item.manifest
        lines.append(
            f"{m.quantization:8} {m.size / MIB:>6.1f} MiB {m.memory.total_bytes / MIB:>6.0f} MiB "
            f"{m.context_window:>8}  {m.digest[:19]}"
        )
    notes = [
        f"  {item.manifest.quantization}: {item.manifest.made.note}"
        for item in packed
        if item.manifest.made.note
    ]
    if notes:
        lines += ["notes:", *notes]
    lines.append(f"manifests: {packed[0].manifest_path.parent}")
    lines.append(f"serve one with: cirrus models add {first.model_id}:{first.quantization}")
    return "\n".join(lines)
