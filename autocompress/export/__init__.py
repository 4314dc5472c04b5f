"""Export: checkpoints that stock vLLM and transformers load (``decilm``: DeciLM for heterogeneous
models, Llama otherwise), written atomically; ``gguf_convert``: a GGUF parent to cached safetensors."""
