"""Import cvxpy without paying for what the feasibility LP never uses.

On these machines ``import cvxpy`` takes 1.3-2 s, mostly outside cvxpy: ``scipy.stats`` (for the
``entropy`` of a quantum atom) and, through ``installed_solvers()`` at import time, the OSQP, SCS
and SciPy-linprog solver packages (~1 s together). We solve a linear program with HiGHS (Clarabel
as fallback), so while cvxpy imports:

* ``scipy.stats`` is a stand-in whose ``entropy`` imports the real module on first call;
* ``scipy.special`` is a lazy stand-in (its functions import the real module when called);
* ``osqp``, ``scs`` and ``scipy.optimize`` are marked absent (``sys.modules[name] = None`` makes
  their import raise ModuleNotFoundError, which cvxpy's solver probe treats as "not installed").

* ``scipy.linalg``, ``scipy.sparse.linalg`` and ``pydoc`` (scipy's docstring scraper), ~0.1 s, are
  bound by name at import and used only inside functions: they are deferred, i.e. replaced by a
  stand-in that imports the real module on its first attribute access;
* NumPy's lazily loaded submodules (``f2py``, ``testing``, ``ma``, ``polynomial``, ``ctypeslib``),
  ~0.1 s: scipy's array-API layer copies every public name of ``numpy``, which imports them all;
  while cvxpy imports, ``numpy`` carries deferred stand-ins under those names.

Every stand-in is removed right after, so later imports of these modules get the real ones; the
deferred ones left in cvxpy's and scipy's namespaces turn into the real module on first use. Only
cvxpy's own list of installed solvers, in this process, lacks OSQP, SCS and SCIPY.
``bench/check_latency.py`` measures the effect.
"""

from __future__ import annotations

import importlib
import os
import sys
import types

import numpy

_ABSENT = ("osqp", "scs", "scipy.optimize")
_LAZY = ("scipy.special",)  # cvxpy's entropy / log-sum-exp atoms take functions from it at import
# Bound by name at import and used inside functions; the names taken from them at import time,
# all functions, become stand-ins too (cvxopt_conif: ``from scipy.sparse.linalg import eigsh``).
_DEFERRED = {"scipy.linalg": (), "scipy.sparse.linalg": ("eigsh",), "pydoc": ()}
_NUMPY_DEFERRED = ("f2py", "testing", "ma", "polynomial", "ctypeslib")  # not numpy.random: scipy reads it


class _LazyModule(types.ModuleType):
    """Stands in for a module while cvxpy imports: each attribute is a function that imports the
    real module on first call (none is called by the LP we solve)."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        name = self.__name__

        def call(*args, **kwargs):
            sys.modules.pop(name, None) if sys.modules.get(name) is self else None
            return getattr(importlib.import_module(name), attr)(*args, **kwargs)

        call.__name__ = attr
        return call


class _Deferred(types.ModuleType):
    """Stands in for a module that is only bound by name while cvxpy imports: the first attribute
    access imports the real module and reads the attribute from it (``calls``: functions taken
    from it during the import, each a stand-in that imports the module when called)."""

    def __init__(self, name: str, calls: tuple[str, ...] = ()):
        super().__init__(name)
        self._calls = calls

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__") or attr == "_calls":
            raise AttributeError(attr)
        name = self.__name__
        if sys.modules.get(name) is self:  # still inside the import window
            if attr in self._calls:
                return _LazyModule(name).__getattr__(attr)
            del sys.modules[name]
        real = importlib.import_module(name)
        self.__dict__[attr] = value = getattr(real, attr)  # later reads skip __getattr__
        return value


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
    for name, calls in _DEFERRED.items():
        if name not in sys.modules:
            planted[name] = _Deferred(name, calls)
    np_planted = {attr: _Deferred(f"numpy.{attr}") for attr in _NUMPY_DEFERRED
                  if f"numpy.{attr}" not in sys.modules and attr not in numpy.__dict__}
    sys.modules.update(planted)
    numpy.__dict__.update(np_planted)
    try:
        import cvxpy as cp
    finally:
        for name, obj in planted.items():
            if sys.modules.get(name, 0) is obj:
                del sys.modules[name]
        for attr, obj in np_planted.items():
            if numpy.__dict__.get(attr) is obj:
                del numpy.__dict__[attr]
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
