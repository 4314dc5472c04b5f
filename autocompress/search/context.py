"""What every search strategy reads, and what it returns.

    SearchContext   one strategy's inputs, made once per search stage (``strategy.search_context``):
                    the contract's spec and parent, the derived settings (profile, device, limits,
                    space), the strategy's build settings, the parent's family, permuted weights
                    and config, the teacher outputs and training rows, the measured importance, the
                    global sweep, the progress and the stage's partial folder
    SearchOutcome   the chosen architecture, how it was chosen, the finalists the shortlist
                    distils and the record of the search; ``to_json``/``from_json`` only where it
                    meets the stage folder (``architecture.json``) and the report

The JSON is the search stage's ``architecture.json`` as it always was, so a cached stage reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from autocompress.build.settings import BuildSettings
from autocompress.data.teacher import TeacherCache
from autocompress.families.base import BuildFamily
from autocompress.feasibility.objective import Importance
from autocompress.feasibility.variants import Swept
from autocompress.ir import Architecture, arch_from_dict, arch_to_dict
from autocompress.lang.model import Spec
from autocompress.nn.hybrid import HybridConfig
from autocompress.plan.derive import Derived
from autocompress.progress import Progress


@dataclass(frozen=True)
class SearchContext:
    spec: Spec
    parent_arch: Architecture
    derived: Derived
    settings: BuildSettings  # the strategy's
    family: BuildFamily
    permuted: dict[str, torch.Tensor]  # the parent's weights, permuted by importance
    cfg: HybridConfig
    teacher: TeacherCache
    train_rows: torch.Tensor
    imp: Importance  # the measured importance
    swept: Swept  # the global sizes' sweep with the measured importance
    progress: Progress
    ckpt_dir: Path | None = None  # the stage's partial folder: router v2 checkpoints there and resumes

    def log(self, message: str) -> None:
        self.progress.log(message)


@dataclass(frozen=True)
class ArchRecord:
    """An architecture and the share of the parent's importance it keeps, as the report lists it.
    ``shape``: its ``ir.arch_to_dict``, kept as written (a global variant's sizes that the parent's
    blocks restore differently stay as they were measured)."""

    arch: Architecture
    importance_kept: float
    shape: dict

    @classmethod
    def of(cls, arch: Architecture, importance: float) -> ArchRecord:
        return cls(arch, float(f"{importance:.4g}"), arch_to_dict(arch))

    def to_json(self) -> dict:
        return {**self.shape, "importance_kept": self.importance_kept}

    @classmethod
    def from_json(cls, d: dict, parent: Architecture) -> ArchRecord:
        shape = {k: v for k, v in d.items() if k != "importance_kept"}
        return cls(arch_from_dict(d, parent), d["importance_kept"], shape)


@dataclass(frozen=True)
class Finalist:
    """A candidate that meets the contract, with its KL to the parent before distillation."""

    name: str
    kl: float | None
    record: ArchRecord

    def to_json(self) -> dict:
        return {"name": self.name, "kl": None if self.kl is None else round(float(self.kl), 4),
                "architecture": self.record.to_json()}

    @classmethod
    def from_json(cls, d: dict, parent: Architecture) -> Finalist:
        return cls(d["name"], d["kl"], ArchRecord.from_json(d["architecture"], parent))


@dataclass(frozen=True)
class SearchOutcome:
    """One strategy's search: the chosen architecture, how, its finalists (least KL first) and the
    record of the search (``search``: router v2's; ``refine``: the measured candidates), beside the
    cvxpy start, the uniform grid's point and the global variants swept."""

    start: ArchRecord
    uniform: ArchRecord | None
    variants: tuple[dict, ...] | None
    chosen: ArchRecord
    how: str
    finalists: tuple[Finalist, ...]
    search: dict | None = None
    refine: dict | None = None

    @property
    def arch(self) -> Architecture:
        return self.chosen.arch

    def to_json(self) -> dict:
        out = {"start": self.start.to_json(), "uniform": self.uniform.to_json() if self.uniform else None}
        if self.variants is not None:
            out["variants"] = [dict(r) for r in self.variants]
        out.update(architecture=self.chosen.to_json(), how=self.how, finalists=[f.to_json() for f in self.finalists])
        if self.search is not None:
            out["search"] = self.search
        if self.refine is not None:
            out["refine"] = self.refine
        return out

    @classmethod
    def from_json(cls, d: dict, parent: Architecture) -> SearchOutcome:
        return cls(ArchRecord.from_json(d["start"], parent),
                   ArchRecord.from_json(d["uniform"], parent) if d.get("uniform") else None,
                   tuple(d["variants"]) if "variants" in d else None,
                   ArchRecord.from_json(d["architecture"], parent), d["how"],
                   tuple(Finalist.from_json(f, parent) for f in d.get("finalists") or ()),
                   d.get("search"), d.get("refine"))


__all__ = ["ArchRecord", "Finalist", "SearchContext", "SearchOutcome"]
