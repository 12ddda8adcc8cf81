"""Prompt keys without a tokenizer, and the table of which instance served which prefix."""

from typing import Any

from cirrus.pool.prefix_routes import PrefixMatch, PrefixRoutes
from cirrus.pool.prompt_keys import CHUNK_CHARS, PromptChain, prompt_chain
from cirrus.runtime.params import GenerationInput

SYSTEM = {"role": "system", "content": "You are terse."}


def chat(*messages: dict[str, Any], **fields: Any) -> PromptChain:
    return prompt_chain(GenerationInput(messages=tuple(messages), **fields))


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def test_the_next_turn_extends_the_chain_of_the_turn_before() -> None:
    first = chat(SYSTEM, user("Hi"))
    second = chat(SYSTEM, user("Hi"), assistant("Hello."), user("How are you?"))
    assert len(first.hashes) == 2 and len(second.hashes) == 4
    assert second.hashes[:2] == first.hashes
    assert len(set(second.hashes)) == 4


def test_a_message_hashes_by_content_whatever_the_order_of_its_keys() -> None:
    assert chat({"role": "user", "content": "Hi"}) == chat({"content": "Hi", "role": "user"})


def test_anything_that_changes_the_rendered_prompt_changes_every_key() -> None:
    plain = chat(SYSTEM, user("Hi"))
    tool = {"type": "function", "function": {"name": "now", "parameters": {}}}
    variants = [
        chat(SYSTEM, user("Hi"), tools=(tool,)),
        chat(SYSTEM, user("Hi"), family="glm"),
        chat(SYSTEM, user("Hi"), enable_thinking=True),
        chat({"role": "system", "content": "You are verbose."}, user("Hi")),
    ]
    for variant in variants:
        assert variant.hashes[1] != plain.hashes[1]
    assert chat(SYSTEM, user("Yo")).hashes[0] == plain.hashes[0], "the same system prompt, a new question"


def test_the_shared_head_is_the_leading_system_messages() -> None:
    developer = {"role": "developer", "content": "Answer in French."}
    assert chat(SYSTEM, developer, user("Hi")).shared_head == 2
    assert chat(user("Hi"), SYSTEM).shared_head == 0


def test_a_text_prompt_is_keyed_by_chunks_and_its_head_is_half_of_them() -> None:
    text = "a" * CHUNK_CHARS + "b" * CHUNK_CHARS + "c" * 10
    chain = prompt_chain(GenerationInput(prompt=text, raw=True))
    longer = prompt_chain(GenerationInput(prompt=text + " and more", raw=True))
    assert len(chain.hashes) == 3 and chain.shared_head == 1
    assert longer.hashes[:2] == chain.hashes[:2] and longer.hashes[2] != chain.hashes[2]
    templated = prompt_chain(GenerationInput(prompt=text))
    assert templated.hashes[0] != chain.hashes[0], "raw and templated prompts render differently"
    assert prompt_chain(GenerationInput(prompt="")).hashes == ()


def test_a_chat_and_a_prompt_of_the_same_text_do_not_match() -> None:
    as_prompt = prompt_chain(GenerationInput(prompt="Hi"))
    assert chat(user("Hi")).hashes[0] != as_prompt.hashes[0]


def test_the_instance_that_served_the_longest_prefix_is_best() -> None:
    routes = PrefixRoutes()
    first_turn = chat(SYSTEM, user("Hi")).hashes
    other = chat(SYSTEM, user("Another topic")).hashes
    routes.remember(first_turn, "inst-a")
    routes.remember(other, "inst-b")
    next_turn = chat(SYSTEM, user("Hi"), assistant("Hello."), user("More")).hashes
    assert routes.best(next_turn, ["inst-b", "inst-a"]) == PrefixMatch("inst-a", 2)
    assert routes.best(next_turn, ["inst-b"]) == PrefixMatch("inst-b", 1), "only the system prompt is shared"
    assert routes.best(chat(user("unseen")).hashes, ["inst-a", "inst-b"]) is None


def test_among_equal_matches_the_first_candidate_wins() -> None:
    routes = PrefixRoutes()
    chain = chat(SYSTEM, user("Hi")).hashes
    routes.remember(chain, "inst-a")
    routes.remember(chain, "inst-b")
    assert routes.best(chain, ["inst-b", "inst-a"]) == PrefixMatch("inst-b", 2)
    assert routes.best(chain, ["inst-a", "inst-b"]) == PrefixMatch("inst-a", 2)


def test_a_forgotten_instance_is_never_chosen_and_its_entries_go() -> None:
    routes = PrefixRoutes()
    shared = chat(SYSTEM).hashes
    routes.remember(chat(SYSTEM, user("Hi")).hashes, "inst-a")
    routes.remember(shared, "inst-b")
    routes.forget("inst-a")
    assert routes.best(chat(SYSTEM, user("Hi")).hashes, ["inst-a", "inst-b"]) == PrefixMatch("inst-b", 1)
    assert len(routes) == 1, "the prefix only inst-a served is dropped; the shared one stays for inst-b"


def test_the_table_forgets_the_least_recently_served_prefixes_first() -> None:
    routes = PrefixRoutes(capacity=4)
    old = chat(SYSTEM, user("old")).hashes
    routes.remember(old, "inst-a")
    routes.remember(chat(SYSTEM, user("new"), assistant("ok"), user("on")).hashes, "inst-b")
    assert len(routes) == 4
    assert routes.best(old, ["inst-a"]) == PrefixMatch("inst-a", 1), (
        "its turn was dropped, not the system prompt"
    )


def test_a_deep_match_survives_its_shallow_prefixes_being_dropped() -> None:
    """Shallow keys of an old chain are the oldest; the deep key alone still proves the whole prefix."""
    routes = PrefixRoutes(capacity=3)
    chain = chat(user("a"), assistant("b"), user("c")).hashes
    routes.remember(chain, "inst-a")
    routes.remember(chat(user("x")).hashes, "inst-b")
    routes.remember(chat(user("y")).hashes, "inst-b")
    assert len(routes) == 3
    assert routes.best(chain, ["inst-a"]) == PrefixMatch("inst-a", 3)
