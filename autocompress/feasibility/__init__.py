"""Feasibility: does an architecture in the search space meet the contract? Entry point
``assess.assess``; ``metrics`` (the relaxation's cost rows), ``lp`` (the cvxpy program), ``pins``
(pinned structures), ``rounding``, ``uniform``, ``exact`` (the exact check), ``objective``."""
