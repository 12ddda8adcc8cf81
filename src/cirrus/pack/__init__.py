"""`cirrus pack`: convert a checkpoint to GGUF, quantize it with llama.cpp, and store each variant."""
