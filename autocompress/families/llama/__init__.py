"""The Llama build family: Llama, SmolLM2, Mistral and DeciLM (``nemotron-nas``) parents."""
