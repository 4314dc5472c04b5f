"""The architecture's choice as cached stages of ``acc build``: the search of one strategy, then
the final choice among its finalists (the shortlist's short distillations and a runoff of a
near-tie). Orchestration only: the search is ``search.strategy``, the distillations
``build.shortlist``, the runoff's rule ``build.runoff``. Both arms of an A/B run these same
functions (``pipeline.run_build``), so they get the same information, budget and selection.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from autocompress.build import runoff
from autocompress.build.prepare import Prepared
from autocompress.build.settings import BuildSettings
from autocompress.build.shortlist import Entrant, short_distill_choice, validation_rows
from autocompress.build.stages import run_stage, stage_key
from autocompress.ir import Architecture
from autocompress.search.config import search_key_parts
from autocompress.search.context import Finalist, SearchOutcome
from autocompress.search.strategy import SearchInputs, choose_architecture, search_context


def search(p: Prepared, strat: BuildSettings) -> SearchOutcome:
    """The search stage of one strategy: its outcome (the architecture, how it was chosen, its
    finalists), read back from the stage's ``architecture.json``."""
    def search_stage(tmp: Path, partial: Path) -> dict:
        # router v2 checkpoints in the stage's partial folder: a killed search resumes
        inputs = SearchInputs(p.spec, p.parent.architecture, p.derived, p.importance.path / "importance.json", strat,
                              p.progress, ckpt_dir=partial)
        chosen = choose_architecture(search_context(inputs, p.family, p.permuted, p.cfg, p.teacher, p.data.train))
        (tmp / "architecture.json").write_text(json.dumps(chosen.to_json(), indent=2))
        return {"strategy": strat.strategy}

    key = stage_key("search", p.family.code["search"], p.spec_key, p.importance.key, p.teacher_key,
                    *search_key_parts(strat))
    tag = "" if strat.strategy == p.settings.strategy else f" ({strat.strategy})"
    st = p.timed(f"search{tag}", lambda: run_stage(p.work, f"search-{strat.strategy}", key, search_stage,
                                                   p.progress.log, collective=True))
    return SearchOutcome.from_json(json.loads((st.path / "architecture.json").read_text()), p.parent.architecture)


def student_maker(p: Prepared):
    """``arch -> a fresh student module``: the parent's permuted weights sliced to ``arch`` by the
    family (what the shortlist distils)."""
    def make(arch):
        state, extras = p.family.extract(p.permuted, p.cfg, arch)
        return p.family.student(arch, state, extras)
    return make


def distil_round(p: Prepared, strat: BuildSettings, finalists: tuple[Finalist, ...], picked: list[int], steps: int,
                 name: str) -> dict:
    """One round of short distillations (``shortlist.short_distill_choice``) of the finalists
    ``picked`` for ``steps`` steps each, as a cached stage: the shortlist's first round (``name``
    "shortlist") or a runoff ("runoff"); the result is the stage's ``shortlist.json``.
    Keyed like distillation, by what it reads (the architectures in order, the permuted weights,
    the teacher outputs, the recipe), not by the search that listed them or its names for them,
    so two strategies' equal runoff entrants are distilled once; the rows carry this search's
    names and KLs (as its ``architecture.json`` lists them)."""
    listed = [finalists[i].to_json() for i in picked]
    entrants = [Entrant(f["name"], f["kl"], finalists[i].record.arch) for f, i in zip(listed, picked)]

    def body(tmp: Path, partial: Path) -> dict:
        res = short_distill_choice(entrants, student_maker(p), p.teacher, p.data.train,
                                   replace(strat, finalist_steps=steps), partial, p.progress)
        (tmp / "shortlist.json").write_text(json.dumps(res, indent=1))
        return {"chosen": res["chosen"]}

    key = stage_key(name, ("autocompress.build.shortlist", *p.family.code["distill"]), p.importance.key,
                    p.teacher_key, json.dumps([f["architecture"] for f in listed], sort_keys=True),
                    json.dumps((steps, strat.batch, strat.lr, strat.seed, validation_rows(p.data.train.shape[0]))))
    # the first round's folder names its strategy (the build log's line); a runoff's does not
    folder = f"shortlist-{strat.strategy}" if name == "shortlist" else name
    tag = "" if strat.strategy == p.settings.strategy else f" ({strat.strategy})"
    st = p.timed(f"{name}{tag}", lambda: run_stage(p.work, folder, key, body, p.progress.log))
    res = json.loads((st.path / "shortlist.json").read_text())
    for row, f in zip(res["finalists"], listed):
        row.update(name=f["name"], kl_search=f["kl"])
    return res


def shortlist(p: Prepared, strat: BuildSettings, outcome: SearchOutcome) -> tuple[dict, Architecture]:
    """The final choice by a short distillation of the search's finalists (``build.shortlist``),
    then a runoff of a near-tie (``build.runoff``), the same for every strategy: (how it was
    chosen, as the report's JSON with the shortlist's table; the architecture). One finalist: the
    search's choice."""
    chosen = outcome.to_json()
    finalists = outcome.finalists
    if strat.finalists <= 1 or len(finalists) <= 1:
        return chosen, outcome.arch
    res = distil_round(p, strat, finalists, list(range(len(finalists))), strat.finalist_steps, "shortlist")
    picked = runoff.entrants(res, strat.runoff_margin)
    if picked:
        p.progress.log(f"[runoff] {finalists[picked[0]].name} and {finalists[picked[1]].name} are within "
                       f"{strat.runoff_margin:.0%} after {strat.finalist_steps} steps: both distilled again for "
                       f"{strat.runoff_steps}")
        second = distil_round(p, strat, finalists, picked, strat.runoff_steps, "runoff")
        res = runoff.merge(res, second, picked, strat.runoff_margin)
    pick = finalists[res["chosen"]]
    how = runoff.describe(res)
    p.progress.log(f"[shortlist] {how}")
    return {**chosen, "architecture": pick.record.to_json(), "how": how, "how_search": chosen.get("how"),
            "shortlist": res}, pick.record.arch


__all__ = ["distil_round", "search", "shortlist", "student_maker"]
