"""Parent models -> architecture IR, without loading weights.

* ``resolve_parent(ref, base_dir) -> ParentInfo``: the spec's ``model`` line (alias, HF folder,
  bare config.json or .gguf) to the IR plus provenance and a content hash.
* ``architecture_from_config(dict)``: one builder per ``model_type`` (registry ``FAMILIES``).
* ``read_gguf(path)`` / ``architecture_from_gguf(header)``: a pure-Python GGUF header reader.
* ``ALIASES``: built-in names for models that ship on the package registry.

Pure Python; importing this package stays cheap.
"""

from autocompress.parents.aliases import ALIASES, AliasInfo
from autocompress.parents.gguf_meta import (GGUFError, GGUFHeader, TensorInfo, architecture_from_gguf,
                                            parse_gguf, read_gguf)
from autocompress.parents.hf_config import (FAMILIES, ConfigError, architecture_from_config,
                                            ffn_mult_to_intermediate_size)
from autocompress.parents.resolve import ParentInfo, resolve_parent

__all__ = [
    "ALIASES", "AliasInfo", "FAMILIES", "ConfigError", "GGUFError", "GGUFHeader", "ParentInfo", "TensorInfo",
    "architecture_from_config", "architecture_from_gguf", "ffn_mult_to_intermediate_size", "parse_gguf",
    "read_gguf", "resolve_parent",
]
