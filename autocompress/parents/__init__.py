"""Parent models -> architecture IR, without loading weights: ``resolve.resolve_parent`` (the spec's
model line), ``hf_config`` (config.json, read by each family's reader), ``gguf_meta`` (GGUF headers),
``aliases``."""
