"""Small functional models over dicts of Hugging Face-named weights (teacher and supernet in one):
``llama`` (Llama / Mistral / SmolLM2 and DeciLM-shaped decoders)."""
