"""Model classes shipped inside exported checkpoints (``configuration_decilm``, ``modeling_decilm``,
self-contained) and ``register`` (in-process registration with the transformers Auto classes)."""
