"""Import cvxpy without paying for scipy.stats.

cvxpy imports ``scipy.stats`` (about 0.5 s of the 1.3-2 s cvxpy import on these machines) only for
``entropy`` in its quantum relative-entropy atom, which we never use. While cvxpy imports we give
it a stand-in module whose ``entropy`` imports the real one on first call; the stand-in is removed
right after, so any later ``import scipy.stats`` gets the real module.
"""

from __future__ import annotations

import sys
import types


def cvxpy():
    if "cvxpy" in sys.modules:
        return sys.modules["cvxpy"]
    shim = None
    if "scipy.stats" not in sys.modules:
        shim = types.ModuleType("scipy.stats")

        def entropy(*args, **kwargs):  # pragma: no cover - only reached through quantum atoms
            sys.modules.pop("scipy.stats", None)
            import scipy.stats as real

            return real.entropy(*args, **kwargs)

        shim.entropy = entropy
        sys.modules["scipy.stats"] = shim
    try:
        import cvxpy as cp
    finally:
        if shim is not None and sys.modules.get("scipy.stats") is shim:
            del sys.modules["scipy.stats"]
    return cp
