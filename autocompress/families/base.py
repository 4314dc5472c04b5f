"""The per-family seam of ``acc build``: what a family supplies, as one frozen record of functions.

``acc build`` (``build.prepare``, ``build.pipeline``, ``search.strategy``,
``evaluate.heldout``) calls a parent's family only through a ``BuildFamily``; no stage asks
which family it runs. ``registry.BUILD_FAMILIES`` names the module of each family
(``families.<name>.family``), and that module defines ``FAMILY``. The functions (all fp32, CPU or
any torch device):

=============  ====================================================================================
``load``       folder -> (params, cfg): the parent's weights (canonical names) and config
``config``     folder -> cfg from config.json alone (synthetic models for ``acc profile``)
``forward``    (params, cfg, ids, masks=None, tap=None, return_hidden=False, start=None) -> logits
``importance`` (params, cfg, rows, batch, ablation_rows, progress) -> stats with ``to_json(path)``
               (the file ``feasibility.objective.load_importance`` reads)
``permute``    (params, cfg, stats) -> (permuted params, permutation): same function, prefix order
``supernet``   (permuted, cfg, space, parent_arch) -> a supernet: ``forward(ids, choices, ...)``,
               ``one_hot``, ``indices_of``, ``architecture``, ``hidden_grid``, ``options``
``extract``    (permuted, cfg, arch) -> (state, extras): the student's weights from the parent's
``student``    (arch, state, extras) -> torch module to distil (its ``state_dict`` is what
               ``export`` takes)
``export``     (out, arch, state, tokenizer_dir, extras, overwrite, spec_path, strategy) -> the
               format written (through ``export.writer``'s atomic, manifest-marked folders)
``load_exported`` folder -> the exported model through stock transformers (quality is measured on
               what ships)
=============  ====================================================================================

Every family runs the canonical stack (``families.hybrid``): ``params`` and extracted weights use
``nn.hybrid``'s canonical names, and the family's package (``families/<name>/``) maps its
checkpoint names to them (``load.py``) and back (its export; Llama's student, ``student.py``).

``code`` names, per stage, the modules whose source keys that stage's cache (``cache.code_digest``
follows their package imports): the modules the stage runs, among them the parent's loader for the
stages that read the parent (``families.<name>.load``), and never the family module itself
(``families.<name>.family``), which reaches every stage (its export, the search's supernet) and
would key importance by the search's code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from autocompress.families.registry import BUILD_FAMILIES


@dataclass(frozen=True)
class BuildFamily:
    name: str  # the registry row's name
    load: Callable
    config: Callable
    forward: Callable
    importance: Callable
    permute: Callable
    supernet: Callable
    extract: Callable
    student: Callable
    export: Callable
    load_exported: Callable
    code: Mapping[str, tuple[str, ...]]  # stage -> modules ("importance", "teacher", "search", "distill")

    def __post_init__(self) -> None:
        missing = {"importance", "teacher", "search", "distill"} - set(self.code)
        if missing:
            raise ValueError(f"family {self.name}: no code modules for {sorted(missing)}")
        object.__setattr__(self, "code", MappingProxyType(dict(self.code)))


def family_of(arch_family: str) -> BuildFamily:
    """The ``BuildFamily`` of a parent's IR family (``Architecture.family``); ``KeyError`` when
    ``acc build`` cannot compress it (``registry.require_buildable`` stops such builds earlier).
    The registry names the module (a string: reading the table imports no family's torch side)."""
    return importlib.import_module(f"autocompress.{BUILD_FAMILIES[arch_family].module}").FAMILY
