"""Quantization names as users write them, llama.cpp's file types (`llama_ftype`) behind them."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Quant:
    name: str
    ftype: int
    bits_per_weight: float  # typical; only sizes the progress bar

    @property
    def full_precision(self) -> bool:
        return self.name in FULL_PRECISION


QUANTS = {
    q.name: q
    for q in (
        Quant("F32", 0, 32.0),
        Quant("F16", 1, 16.0),
        Quant("BF16", 32, 16.0),
        Quant("Q8_0", 7, 8.5),
        Quant("Q6_K", 18, 6.56),
        Quant("Q5_K_M", 17, 5.69),
        Quant("Q5_K_S", 16, 5.54),
        Quant("Q5_1", 9, 6.0),
        Quant("Q5_0", 8, 5.5),
        Quant("Q4_K_M", 15, 4.89),
        Quant("Q4_K_S", 14, 4.58),
        Quant("Q4_1", 3, 5.0),
        Quant("Q4_0", 2, 4.5),
        Quant("Q3_K_L", 13, 4.27),
        Quant("Q3_K_M", 12, 3.91),
        Quant("Q3_K_S", 11, 3.5),
        Quant("Q2_K", 10, 3.35),
    )
}
FULL_PRECISION = frozenset({"F32", "F16", "BF16"})
_BY_FTYPE = {q.ftype: q for q in QUANTS.values()}


class UnknownQuant(ValueError):
    pass


def parse_quant(text: str) -> Quant:
    quant = QUANTS.get(text.strip().upper())
    if quant is None:
        raise UnknownQuant(f"no quantization type {text!r}; choose from {', '.join(QUANTS)}")
    return quant


def name_of_ftype(ftype: int) -> str:
    """A GGUF's `general.file_type` as a name (`Q4_1`), or `ftype N` when Cirrus does not know it."""
    quant = _BY_FTYPE.get(ftype)
    return quant.name if quant else f"ftype {ftype}"
