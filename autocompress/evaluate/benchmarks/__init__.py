"""Task accuracy on eight benchmarks (lm-evaluation-harness definitions, offline data): the
registry, the scorer and the cached stage that ``acc eval`` and ``acc build`` run."""
