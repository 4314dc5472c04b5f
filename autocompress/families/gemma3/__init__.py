"""The Gemma 3 build family: ``gemma3_text`` parents (Gemma 3 270M, 1B and the text towers)."""
