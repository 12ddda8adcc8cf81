"""One measurement for speed.py, in a fresh process that loads the build LLAMA_CPP_LIB_PATH names.

    speed_worker.py batch MODEL.gguf     decode steps of batch 1-16, and 64- and 512-token prompts
    speed_worker.py load MODEL.gguf [--n-ctx N]     vocab-only loads, a full load and a context's creation

Prints one JSON line: each case's samples, in seconds. speed.py starts it with the environment to use.
"""

import argparse
import json
import os

from cli_support import CheckError, exit_with, gguf_file
from library import resolve_lib_dir, verify_loaded


def main() -> int:
    root = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root.add_argument("kind", choices=("batch", "load"))
    root.add_argument("model", metavar="MODEL.gguf")
    root.add_argument("--n-ctx", type=int, default=2048)
    args = root.parse_args()
    model = gguf_file(args.model)
    if not os.environ.get("LLAMA_CPP_LIB_PATH"):
        raise CheckError("LLAMA_CPP_LIB_PATH is not set: speed.py runs this worker with the build to measure")
    lib_dir = resolve_lib_dir(os.environ["LLAMA_CPP_LIB_PATH"])
    # Imported only now: importing llama_cpp loads the engine named by the environment.
    from speed_measure import batch_speed, load_speed

    samples = batch_speed(model) if args.kind == "batch" else load_speed(model, args.n_ctx)
    verify_loaded(lib_dir)
    print(json.dumps(samples))
    return 0


if __name__ == "__main__":
    exit_with(main)
