"""The NemotronH build family: hybrid Mamba2 / attention / MLP parents, exported as NemotronH or NemotronH-Puzzle."""
