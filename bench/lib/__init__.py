"""What the benchmarks are made of: the engine options and target they share, the fidelity runs
(interleaved, paired, refitted), the quality runs (arms, the uniform baseline, Pareto levels) and
the distributed distillation run."""
