"""``acc build``: the recipe from a contract to an exported model, and what runs it (settings, output safety, preflight, stage folders, processes, the final choice)."""
