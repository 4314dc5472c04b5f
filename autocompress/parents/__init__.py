"""Parent models -> architecture IR, without loading weights: ``resolve.resolve_parent`` (the spec's
model line), ``hf_config`` (config.json per family), ``gguf_meta`` (GGUF headers), ``aliases``."""
