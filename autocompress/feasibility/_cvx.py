"""Import cvxpy without paying for what the feasibility LP never uses.

On these machines ``import cvxpy`` takes 1.3-2 s, mostly outside cvxpy: ``scipy.stats`` (for the
``entropy`` of a quantum atom) and, through ``installed_solvers()`` at import time, the OSQP, SCS
and SciPy-linprog solver packages (~1 s together). We solve a linear program with HiGHS (Clarabel
as fallback), so while cvxpy imports:

* ``scipy.stats`` is a stand-in whose ``entropy`` imports the real module on first call;
* ``scipy.special`` is a lazy stand-in (its functions import the real module when called);
* ``osqp``, ``scs`` and ``scipy.optimize`` are marked absent (``sys.modules[name] = None`` makes
  their import raise ModuleNotFoundError, which cvxpy's solver probe treats as "not installed").

Every stand-in is removed right after, so later imports of these modules get the real ones; only
cvxpy's own list of installed solvers, in this process, lacks OSQP, SCS and SCIPY.
``bench/check_latency.py`` measures the effect.
"""

from __future__ import annotations

import os
import sys
import types

_ABSENT = ("osqp", "scs", "scipy.optimize")
_LAZY = ("scipy.special",)  # cvxpy's entropy / log-sum-exp atoms take functions from it at import


class _LazyModule(types.ModuleType):
    """Stands in for a module while cvxpy imports: each attribute is a function that imports the
    real module on first call (none is called by the LP we solve)."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        name = self.__name__

        def call(*args, **kwargs):
            import importlib

            sys.modules.pop(name, None) if sys.modules.get(name) is self else None
            return getattr(importlib.import_module(name), attr)(*args, **kwargs)

        call.__name__ = attr
        return call


def cvxpy():
    if "cvxpy" in sys.modules:
        return sys.modules["cvxpy"]
    planted: dict[str, object] = {}
    if "scipy.stats" not in sys.modules:
        shim = types.ModuleType("scipy.stats")

        def entropy(*args, **kwargs):  # pragma: no cover - only reached through quantum atoms
            sys.modules.pop("scipy.stats", None)
            import scipy.stats as real

            return real.entropy(*args, **kwargs)

        shim.entropy = entropy
        planted["scipy.stats"] = shim
    for name in _ABSENT:
        if name not in sys.modules:
            planted[name] = None
    for name in _LAZY:
        if name not in sys.modules:
            planted[name] = _LazyModule(name)
    sys.modules.update(planted)
    try:
        import cvxpy as cp
    finally:
        for name, obj in planted.items():
            if sys.modules.get(name, 0) is obj:
                del sys.modules[name]
    _silence_highs_banner()
    return cp


def _silence_highs_banner() -> None:
    """HiGHS prints a copyright banner to the process's stdout (C level, not Python's sys.stdout)
    the first time a solver object is built, which would corrupt ``acc check --format json``.
    Build that first object with file descriptor 1 pointed at /dev/null."""
    try:
        import highspy
    except ImportError:  # pragma: no cover - cvxpy falls back to Clarabel
        return
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
