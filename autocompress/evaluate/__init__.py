"""Quality of a built model: held-out perplexity, KL and top-1 against the parent, and the eight benchmarks."""
