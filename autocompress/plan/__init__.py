"""Planning: every derived setting with its reason (``derive``) and the search space (``space``,
``options``: the legal sizes per axis and the per-layer options every later stage shares)."""
