"""How much memory a catalog model needs at each quantization, before any weights exist on this machine.

Bits per weight come from llama.cpp's quantize tool (tools/quantize/quantize.cpp, QUANT_OPTIONS), which lists
the size each type gives Llama-3-8B (8,030,261,248 parameters) in GiB: bits = GiB * 2**30 * 8 / parameters.
F16 is two bytes a weight by definition. The mixes keep some tensors at higher precision (Q4_K_M stores half
of attn_v and ffn_down as Q6_K), so these are whole-model averages, not the block formats' nominal bits.
"""

from dataclasses import dataclass

from cirrus.catalog.spec import ModelSpec

GIB = 1024**3
MIB = 1024**2
LLAMA3_8B_PARAMETERS = 8_030_261_248
# QUANT_OPTIONS' "<size>G @ Llama-3-8B" figures, highest precision first.
LLAMA3_8B_GIB = {
    "Q8_0": 7.96,
    "Q6_K": 6.14,
    "Q5_K_M": 5.33,
    "Q4_K_M": 4.58,
    "Q4_0": 4.34,
    "Q3_K_M": 3.74,
    "Q2_K": 2.96,
}
BITS_PER_WEIGHT: dict[str, float] = {
    "F16": 16.0,
    **{name: gib * GIB * 8 / LLAMA3_8B_PARAMETERS for name, gib in LLAMA3_8B_GIB.items()},
}
DEFAULT_QUANT = "Q4_K_M"
# What cirrus.pool.memory adds to every instance: the worker process (64 MiB) and llama.cpp's compute floor
# (48 MiB). The compute buffer also grows with the vocabulary, which a catalog entry does not record.
OVERHEAD_BYTES = 112 * MIB


@dataclass(frozen=True)
class Footprint:
    quant: str
    weights: int
    kv_cache: int  # 0 when the entry gives no kv_bytes_per_token: weights only
    overhead: int = OVERHEAD_BYTES

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.overhead


@dataclass(frozen=True)
class Fit:
    footprint: Footprint  # the quantization it fits at, or the smallest one when nothing does
    budget: int
    target: str  # the quantization the entry installs

    @property
    def fits(self) -> bool:
        return self.footprint.total <= self.budget

    def describe(self) -> str:
        need, budget = _gib(self.footprint.total), _gib(self.budget)
        quant = self.footprint.quant
        caveat = "" if self.footprint.kv_cache else "; weights only"
        if not self.fits:
            return (
                f"too large for this machine: needs {need} GiB even at {quant} ({budget} GiB budget{caveat})"
            )
        if quant != self.target:
            return f"fits only at {quant}, not {self.target} ({need} GiB of a {budget} GiB budget{caveat})"
        return f"fits at {quant} ({need} GiB of a {budget} GiB budget{caveat})"


def weights_bytes(parameters_billions: float, quant: str) -> int:
    return int(parameters_billions * 1e9 * BITS_PER_WEIGHT[quant] / 8)


def footprint(spec: ModelSpec, quant: str) -> Footprint | None:
    """Weights at `quant`, plus the KV cache the pool would allocate (spec.kv_cells) when the entry says how
    many bytes a token takes; None without a parameter count."""
    if spec.parameters is None:
        return None
    kv_cache = (spec.kv_bytes_per_token or 0) * spec.kv_cells
    return Footprint(quant, weights_bytes(spec.parameters, quant), kv_cache)


def footprints(spec: ModelSpec) -> list[Footprint]:
    """Every quantization, highest precision first; empty without a parameter count."""
    found = (footprint(spec, quant) for quant in BITS_PER_WEIGHT)
    return [f for f in found if f is not None]


def target_quant(spec: ModelSpec) -> str:
    """The quantization the entry's packed artifact names (`@cf/org/name:Q4_K_M`), else Q4_K_M."""
    ref = spec.artifact.store or ""
    quant = ref.rpartition(":")[2].upper()
    return quant if quant in BITS_PER_WEIGHT else DEFAULT_QUANT


def fit(spec: ModelSpec, budget: int) -> Fit | None:
    """The entry's own quantization if it fits the budget, else the most precise smaller one that does, else
    the smallest of all (which does not fit); None without a parameter count."""
    target = target_quant(spec)
    names = list(BITS_PER_WEIGHT)
    candidates = [f for f in footprints(spec) if names.index(f.quant) >= names.index(target)]
    if not candidates:
        return None
    chosen = next((f for f in candidates if f.total <= budget), candidates[-1])
    return Fit(chosen, budget, target)


def _gib(size: int) -> str:
    return f"{size / GIB:.1f}"
