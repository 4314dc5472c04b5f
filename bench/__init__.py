"""The benchmarks: one script per question a user asks, run from the repository root.

    python -m bench.fidelity      how close the cost model's predictions come to vLLM's measurements
    python -m bench.quality       quality at equal cost: the search's arms against the uniform baseline
    python -m bench.check_latency how long `acc check` takes, cold and warm, on every example
    python -m bench.scale_out     memory and time of a distributed build; the 2-process distillation
    python -m bench.faults        whether a build killed at any point, or run beside another, ends right

Each writes its table (Markdown, with the command that made it) and its JSON under
``bench/results/<benchmark>/``; ``bench/lib/`` holds what they are made of.
"""
