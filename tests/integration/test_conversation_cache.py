"""Multi-turn conversations find their whole earlier turns in the prefix cache, through the real server: more
conversations than the engine runs at once, interleaved, each turn sending the earlier turns back (the
server's own answers included), as a chat client does."""

import json
from pathlib import Path

import httpx
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

from cirrus.pool.prefix_folders import OWNER_FILE, folder_for, prefix_cache_root
from tests.integration.conftest import SMOLLM
from tests.integration.server import running_server
from tests.integration.test_batching import catalog

SYSTEM = "You are a concise assistant. Answer in one short sentence."
TOPICS = ["rivers", "bread", "owls", "trains", "glass", "tides"]


def replay(client: OpenAI, conversations: int, turns: int) -> list[list[tuple[int, int]]]:
    """(prompt tokens, cached tokens) of each turn of each conversation, turns interleaved round robin."""
    histories: list[list[ChatCompletionMessageParam]] = [
        [{"role": "system", "content": SYSTEM}] for _ in range(conversations)
    ]
    usage: list[list[tuple[int, int]]] = [[] for _ in range(conversations)]
    for turn in range(turns):
        for n, history in enumerate(histories):
            history.append({"role": "user", "content": f"Tell me fact {turn + 1} about {TOPICS[n]}."})
            answer = client.chat.completions.create(
                model=SMOLLM,
                messages=history,
                max_tokens=16,
                temperature=0,
            )
            history.append({"role": "assistant", "content": answer.choices[0].message.content or ""})
            assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
            usage[n].append(
                (answer.usage.prompt_tokens, answer.usage.prompt_tokens_details.cached_tokens or 0)
            )
    return usage


def assert_whole_earlier_turns_cached(usage: list[list[tuple[int, int]]]) -> None:
    for n, turns in enumerate(usage):
        for turn in range(1, len(turns)):
            earlier_prompt, _ = turns[turn - 1]
            prompt, cached = turns[turn]
            assert earlier_prompt <= cached < prompt, f"conversation {n}, turn {turn + 1}: {turns}"


@pytest.mark.integration
def test_more_conversations_than_running_slots_keep_their_turns_in_the_kv_cache(tmp_path: Path) -> None:
    path = catalog(tmp_path, parallel=2, context_window=1024, host_cache_tokens=0)
    with running_server(tmp_path, "--catalog", str(path)) as server:
        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
        assert_whole_earlier_turns_cached(replay(client, conversations=4, turns=3))


@pytest.mark.integration
def test_conversations_evicted_from_the_kv_cache_come_back_from_host_memory(tmp_path: Path) -> None:
    # One running sequence leaves room for two idle ones: six conversations must go through the host tier.
    path = catalog(tmp_path, parallel=1, context_window=1024, host_cache_tokens=8192)
    with running_server(tmp_path, "--catalog", str(path)) as server:
        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
        assert_whole_earlier_turns_cached(replay(client, conversations=6, turns=3))


@pytest.mark.integration
def test_a_conversation_continues_from_disk_after_its_model_scaled_to_zero(tmp_path: Path) -> None:
    """...and the server, as it starts, removes the prefix cache kept for weights that are gone."""
    path = catalog(tmp_path, parallel=2, context_window=1024)
    removed_weights = tmp_path / "removed.gguf"
    removed_weights.write_bytes(b"weights removed since")
    stale = folder_for(prefix_cache_root(tmp_path / "state"), removed_weights)
    (stale / "entry.kv").write_bytes(b"a state computed by the removed weights")
    removed_weights.unlink()
    with running_server(tmp_path, "--catalog", str(path)) as server:
        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
        [turns] = replay(client, conversations=1, turns=1)
        unloaded = httpx.post(f"{server.url}/admin/models/{SMOLLM}/unload", timeout=60)
        assert unloaded.status_code == 200 and unloaded.json()["result"]["stopped"] == 1
        assert server.instances() == []
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Tell me fact 1 about {TOPICS[0]}."},
        ]
        answer = client.chat.completions.create(model=SMOLLM, messages=messages, max_tokens=4, temperature=0)
        assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
        [(prompt_tokens, _)] = turns
        assert answer.usage.prompt_tokens_details.cached_tokens == prompt_tokens - 1
        assert len(server.instances()) == 1
    assert not stale.exists()
    [kept] = (tmp_path / "state" / "prefix-cache").iterdir()  # the served model's, which it continued from
    assert Path(json.loads((kept / OWNER_FILE).read_text())["path"]).is_file()
