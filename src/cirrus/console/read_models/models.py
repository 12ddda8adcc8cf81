"""The Models page's cards: each catalog model's install state, whether it fits this machine's memory budget,
its running instances, its prices (per million tokens, in USD and in neurons), and the packed variants the
local store holds with what `cirrus eval quality` recorded in their manifests."""

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cirrus.catalog import Catalog, ModelSpec
from cirrus.catalog.footprint import fit
from cirrus.metering.neurons import neurons_for
from cirrus.store.local import LocalStore
from cirrus.store.manifest import Manifest, ManifestError

# What a manifest's `evaluation` may hold (cirrus.evals.quality.ModelQuality), in the order a card shows it.
EVALUATION_FIELDS = (
    ("perplexity", "perplexity"),
    ("kl_mean", "KL mean"),
    ("kl_p99", "KL p99"),
    ("top1_agreement", "top-1 agreement"),
    ("cosine_mean", "cosine mean"),
    ("prompt_tps", "prompt tokens/s"),
    ("decode_tps", "decode tokens/s"),
    ("peak_rss_bytes", "peak memory"),
    ("load_s", "load time (s)"),
    ("largest_context", "largest context within limits"),
)


@dataclass(frozen=True)
class Price:
    """Per million tokens."""

    label: str
    usd: float

    @property
    def neurons(self) -> float:
        return neurons_for(self.usd)


@dataclass(frozen=True)
class Variant:
    """One packed variant (`@cf/org/name:QUANT`) and what its manifest records."""

    ref: str
    quantization: str
    size_bytes: int
    context_window: int
    memory_bytes: int  # one instance's estimate at `memory_context` KV cells
    memory_context: int
    evaluation: list[tuple[str, Any]]  # (label, value) of each recorded figure; empty when never evaluated
    evaluated_on: str | None


@dataclass(frozen=True)
class ModelCard:
    spec: ModelSpec
    installed: bool
    fits: bool | None  # None: nothing says how large it is
    memory_note: str
    instances: dict[str, int]  # state -> how many
    prices: list[Price]
    variants: list[Variant] = field(default_factory=list)


@dataclass(frozen=True)
class ModelsView:
    budget_bytes: int
    used_bytes: int
    cards: list[ModelCard]


def prices(spec: ModelSpec) -> list[Price]:
    pricing = spec.pricing
    found = [Price("input", pricing.input_per_million)]
    if pricing.cached_input_per_million is not None:
        found.append(Price("cached input", pricing.cached_input_per_million))
    if spec.task == "text-generation":
        found.append(Price("output", pricing.output_per_million))
    return found


def variant(manifest: Manifest) -> Variant:
    evaluation = manifest.evaluation or {}
    recorded = [
        (label, evaluation[key]) for key, label in EVALUATION_FIELDS if evaluation.get(key) is not None
    ]
    return Variant(
        ref=manifest.ref,
        quantization=manifest.quantization,
        size_bytes=manifest.size,
        context_window=manifest.context_window,
        memory_bytes=manifest.memory.total_bytes,
        memory_context=manifest.memory.context_tokens,
        evaluation=recorded,
        evaluated_on=str(evaluation["date"]) if evaluation.get("date") else None,
    )


def variants_of(store: LocalStore, model_id: str) -> list[Variant]:
    """A model with a manifest that cannot be read shows no variants rather than fail the page (`cirrus pack`
    and `cirrus models add` report the bad file)."""
    try:
        return [variant(m) for m in store.manifests(model_id)]
    except (ManifestError, OSError):
        return []


def memory_of(spec: ModelSpec, known: tuple[int, int] | None, budget: int) -> tuple[bool | None, str]:
    """From the instance estimate made from its GGUF when there is one, else from the catalog's figures."""
    if known is not None:
        need = known[0]
        verdict = "fits" if need <= budget else "too large for this machine"
        return (
            need <= budget,
            f"{verdict}: an instance needs {need / 2**20:,.0f} MiB of a {budget / 2**20:,.0f} MiB budget",
        )
    estimate = fit(spec, budget)
    if estimate is None:
        return None, "size not known until it is first loaded"
    return estimate.fits, estimate.describe()


def model_cards(
    catalog: Catalog,
    store: LocalStore,
    known_sizes: dict[str, tuple[int, int]],
    instances: list[tuple[str, str]],
    budget: int,
) -> list[ModelCard]:
    """`instances`: (model, state) of each running instance; `known_sizes` as ProcessLauncher.known_sizes."""
    by_model: dict[str, Counter[str]] = {}
    for model, state in instances:
        by_model.setdefault(model, Counter())[state] += 1
    cards = []
    for entry in catalog.entries():
        spec = entry.spec
        fits, note = memory_of(spec, known_sizes.get(spec.id), budget)
        cards.append(
            ModelCard(
                spec=spec,
                installed=entry.installed,
                fits=fits,
                memory_note=note,
                instances=dict(sorted(by_model.get(spec.id, Counter()).items())),
                prices=prices(spec),
                variants=variants_of(store, spec.id),
            )
        )
    return cards
