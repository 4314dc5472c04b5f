"""Hugging Face ``config.json`` -> ``Architecture``: parse, dispatch on ``model_type``, word the errors.

Each family's reader lives in its folder (``families/<name>/config.py``); ``families.readers.CONFIG_READERS``
is the literal table from ``model_type`` to reader (style rule 8), and a test checks every entry
against a real config in ``examples/configs``. The readers take ``config_access.Cfg`` (typed, checked
access) and the helpers shared there; what the IR does not carry, each counts in ``notes``.
"""

from __future__ import annotations

from typing import Any

from autocompress.families.readers import CONFIG_READERS
from autocompress.ir import Architecture
from autocompress.parents.config_access import Cfg, ConfigError


def architecture_from_config(config: dict[str, Any], name: str = "", where: str = "config.json") -> Architecture:
    """Build the IR from a parsed config.json. Raises ``ConfigError`` naming the bad key."""
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: must be a JSON object")
    model_type = config.get("model_type")
    supported = ", ".join(sorted(CONFIG_READERS))
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(f"{where}: missing 'model_type' (supported: {supported})", "model_type")
    reader = CONFIG_READERS.get(model_type)
    if reader is None:
        raise ConfigError(f"{where}: unsupported model_type; supported: {supported}", "model_type")
    try:
        return reader(Cfg(config, where), name or str(config.get("_name_or_path") or ""))
    except ConfigError:
        raise
    except ValueError as e:  # an IR invariant (e.g. kv heads must divide q heads); its text quotes the sizes
        raise ConfigError(f"{where}: the sizes it gives do not make a valid {model_type} architecture (every size "
                          "positive, KV heads dividing query heads, at least one layer)") from e
    except (TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError) as e:  # a value of the wrong shape
        raise ConfigError(f"{where}: cannot be read as a {model_type} config: a key holds a value of the wrong "
                          "type or shape") from e
