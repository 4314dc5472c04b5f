"""The architecture search: strategies, per-layer cost tables, router v2 over the weight-sharing supernet, measured refinement, palettes, the uniform frontier."""
