"""autocompress: deployment contract in, compressed model out.

Importing the package stays cheap (no torch, no transformers, no cvxpy): ``acc check`` must answer
in about two seconds. Heavy dependencies are imported inside the stages that use them.

Importing autocompress registers our DeciLM (``nemotron-nas``) classes with transformers'
``AutoConfig`` / ``AutoModelForCausalLM``, so exported checkpoints load without remote code: at
once if transformers is already imported, else the moment it is (a one-shot import hook; the
registration is skipped, never raised, if it fails, so a user's ``import transformers`` is never
broken by us).
"""

import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"


def _register_quietly() -> None:
    try:
        from autocompress.modeling import register

        register()
    except Exception:  # noqa: BLE001 - registration is a convenience; loading with remote code still works
        pass


class _RegisterWhenTransformersLoads(importlib.abc.MetaPathFinder):
    """Wraps the loader of ``transformers`` (once) to register our classes after it executes."""

    def find_spec(self, name, path=None, target=None):
        if name != "transformers":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            _register_quietly()

        spec.loader.exec_module = exec_module
        return spec


if "transformers" in sys.modules:
    _register_quietly()
elif not any(isinstance(f, _RegisterWhenTransformersLoads) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWhenTransformersLoads())
