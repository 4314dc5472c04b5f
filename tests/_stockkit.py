"""The first lines of a script run in a fresh process where some packages cannot be imported.

An exported model must load in stock transformers or vLLM with autocompress absent: the script
starts with ``STOCK`` (or ``NO_AUTOCOMPRESS`` for vLLM), so an import of autocompress there, by
the checkpoint's code or anything it loads, fails loudly instead of passing on a machine that has
autocompress installed. ``without("matplotlib")`` plays an optional extra that is not installed.

Every test folder imports this module by name: pytest puts ``tests/`` on ``sys.path`` (the
folder of the root ``conftest.py``, which has no ``__init__.py``; the default prepend mode).
"""

from __future__ import annotations

import textwrap


def without(*packages: str) -> str:
    """Source that makes importing any of ``packages``, or a submodule of one, raise ImportError:
    a ``sys.meta_path`` finder asked before all others (it also imports ``sys``)."""
    return textwrap.dedent(
        f"""\
        import sys
        class _Blocked:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {tuple(packages)!r}:
                    raise ImportError(name.split(".")[0] + " must not be imported here: " + name)
        sys.meta_path.insert(0, _Blocked())
        """
    )


NO_AUTOCOMPRESS = without("autocompress") + "import json\n"
# a stock transformers loader: torch and the two Auto classes the loaders use
STOCK = NO_AUTOCOMPRESS + "import torch\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
