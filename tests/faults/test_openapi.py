"""The OpenAPI description is valid, and every operation it describes, fuzzed by schemathesis against a real
`cirrus serve`, answers without a server error.

Bounded and repeatable: a few examples per operation, derandomized and seeded, a short request time limit on
the server and a timeout on each call. Generation goes to the real SmolLM2 (the model in every fuzzed body and
path), with `max_tokens` capped so each answer stays short; everything else is what schemathesis generates,
valid bodies and invalid ones.
"""

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from openapi_spec_validator import validate
from schemathesis import APIOperation, Case, GenerationMode, HookContext
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err, Ok
from schemathesis.schemas import BaseSchema

from tests.integration.server import Server, running_server

MODEL = "@cf/huggingface/smollm2-135m-instruct"
MAX_TOKENS = 4
SEED = 20261201
CALL_TIMEOUT_S = 30.0
EXAMPLES = 8  # per operation and mode
PATH_PARAMETER = re.compile(r"{([^}]+)}")
Operation = APIOperation[Any, Any, Any, Any]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(
        tmp_path_factory.mktemp("openapi"), spare_workers="0", request_timeout_s="10", queue_size="64"
    ) as running:
        yield running


@pytest.fixture(scope="module")
def description(server: Server) -> dict[str, Any]:
    document: dict[str, Any] = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
    return document


def test_the_description_is_valid_openapi(description: dict[str, Any]) -> None:
    validate(description)  # raises on the first violation


def test_every_path_parameter_is_declared_on_every_operation(description: dict[str, Any]) -> None:
    undeclared = []
    for path, operations in description["paths"].items():
        in_path = set(PATH_PARAMETER.findall(path))
        for method, operation in operations.items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            if declared != in_path:
                undeclared.append(f"{method.upper()} {path}: {sorted(in_path - declared)}")
    assert not undeclared
    assert any(path.startswith("/client/v4/accounts/{account_id}/") for path in description["paths"])
    assert {
        "/v1/responses",
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/input_items",
        "/v1/messages",
    } <= set(description["paths"])


def map_path_parameters(context: HookContext, path_parameters: dict[str, Any]) -> dict[str, Any]:
    """A model that exists, so the fuzzed requests reach generation rather than stop at 'no such model'."""
    if isinstance(path_parameters, dict) and isinstance(path_parameters.get("model"), str):
        return {**path_parameters, "model": MODEL}
    return path_parameters


def map_body(context: HookContext, body: Any) -> Any:
    """The real model, and short answers: schemathesis may ask for billions of tokens, or leave the model's
    default (hundreds) by sending none."""
    if not isinstance(body, dict):
        return body
    mapped = dict(body)
    if isinstance(mapped.get("model"), str):
        mapped["model"] = MODEL
    if "prompt" in mapped or "messages" in mapped:
        mapped.setdefault("max_tokens", MAX_TOKENS)
    if "input" in mapped:  # the Responses API
        mapped.setdefault("max_output_tokens", MAX_TOKENS)
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = mapped.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS:
            mapped[name] = MAX_TOKENS
    return mapped


@pytest.fixture(scope="module")
def api_schema(server: Server) -> BaseSchema:
    config = schemathesis.Config.from_dict({"seed": SEED, "generation": {"deterministic": True}})
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=config)
    schema.hook(map_path_parameters)
    schema.hook(map_body)
    return schema


def server_errors(server: Server, operation: Operation, mode: GenerationMode) -> list[str]:
    """Fuzz one operation; each case that answers a server error is recorded, not shrunk (shrinking would
    replay requests for as long as it finds smaller ones)."""
    found: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Case[Operation]) -> None:
        response = case.call(base_url=server.url, timeout=CALL_TIMEOUT_S)
        try:
            case.validate_response(response, checks=[not_a_server_error])
        except* AssertionError:  # schemathesis's failures are assertion errors, in a group
            found.append(
                f"{case.method} {case.formatted_path} body={case.body!r:.200}: {response.status_code} "
                f"{response.text[:200]}"
            )

    try:
        run()
    except Unsatisfiable:  # nothing in the operation can be made invalid (no parameters, no body)
        assert mode is GenerationMode.NEGATIVE
    return found


def test_no_operation_answers_a_server_error(api_schema: BaseSchema, server: Server) -> None:
    results = list(api_schema.get_all_operations())
    assert not [result.err() for result in results if isinstance(result, Err)]  # none unusable
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert any(op.path.startswith("/client/v4/accounts/{account_id}/") for op in operations)
    found = [
        error
        for operation in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        for error in server_errors(server, operation, mode)
    ]
    assert not found, "\n".join(found)
