"""One functional torch decoder over the architecture IR on canonical weights (``hybrid``: attention,
MLP, MoE, Mamba2 blocks), used as teacher, supernet and student by every family."""
