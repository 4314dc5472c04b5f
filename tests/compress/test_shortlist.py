"""The final choice by a short distillation of the search's finalists (``build.shortlist``)."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

import _distillkit as kit  # noqa: E402

from autocompress.build import runoff  # noqa: E402

from autocompress.build import shortlist  # noqa: E402
from autocompress.search.refine import Scored, choose  # noqa: E402
from autocompress.data.teacher import cache_teacher  # noqa: E402
from autocompress.progress import LogOnly, Progress  # noqa: E402

SETTINGS = SimpleNamespace(finalist_steps=5, batch=2, lr=1e-2, seed=0)
NOISE = {"far": 0.3, "near": 0.02, "middle": 0.1}


class Recording:
    """A teacher cache that records which rows each read asks for."""

    def __init__(self, cache):
        self.cache, self.rows, self.reads = cache, cache.rows, []

    def get(self, rows):
        self.reads.append([int(r) for r in torch.as_tensor(rows).tolist()])
        return self.cache.get(rows)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    teacher = kit.tiny_llama(0)
    tokens = kit.random_tokens(24, 16, seed=3)
    cache = cache_teacher(teacher, tokens, "tiny-0", k=16, batch=6, chunk_rows=8,
                          cache_dir=tmp_path_factory.mktemp("teacher"))
    return teacher, tokens, cache


def _finalists():
    return [shortlist.Entrant(n, 0.1 * i, SimpleNamespace(params=lambda: 1000, noise=NOISE[n]))
            for i, n in enumerate(NOISE)]


def _maker(teacher, made: list):
    def make(arch):  # a "pruned" student: the parent's weights, disturbed as much as the finalist says
        made.append(arch.noise)
        student = copy.deepcopy(teacher)
        with torch.no_grad():
            g = torch.Generator().manual_seed(7)
            for p in student.parameters():
                p.add_(arch.noise * torch.randn(p.shape, generator=g))
        return student
    return make


def test_validation_rows_are_few_and_never_all():
    assert shortlist.validation_rows(240) == 16 and shortlist.validation_rows(64) == 8
    assert shortlist.validation_rows(8) == 1 and shortlist.validation_rows(3) == 1


def test_least_kl_after_wins_and_the_short_distillation_never_reads_the_validation_rows(setup, tmp_path):
    teacher, tokens, cache = setup
    rec, made = Recording(cache), []
    res = shortlist.short_distill_choice(_finalists(), _maker(teacher, made), rec, tokens, SETTINGS, tmp_path,
                                         Progress())
    rows, first = res["finalists"], 24 - shortlist.validation_rows(24)
    assert res["validation_rows"] == 3 and res["validation_tokens"] == 3 * 16 and res["steps"] == 5
    assert made == [0.3, 0.02, 0.1]  # each finalist built once, in the search's order
    assert res["chosen"] == min(range(3), key=lambda j: rows[j]["kl_after"])
    # a student nearer the parent starts nearer on the held-apart rows; distillation brings the far one closer
    assert rows[1]["kl_before"] < rows[2]["kl_before"] < rows[0]["kl_before"]
    assert rows[0]["kl_after"] < rows[0]["kl_before"]
    train = [r for r in rec.reads if max(r) < first]
    held = [r for r in rec.reads if min(r) >= first]
    assert len(train) + len(held) == len(rec.reads)  # no read mixes the two
    assert len(train) == 3 * SETTINGS.finalist_steps  # every distillation step read training rows only
    assert sorted({r for read in held for r in read}) == list(range(first, 24))
    # a finished finalist's checkpoints are gone (only its result is kept for a resume)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["finalist-0.json", "finalist-1.json", "finalist-2.json"]


def test_a_killed_shortlist_measures_only_the_rest(setup, tmp_path):
    teacher, tokens, cache = setup
    made: list = []
    full = shortlist.short_distill_choice(_finalists(), _maker(teacher, made), cache, tokens, SETTINGS, tmp_path / "a",
                                          Progress())
    part = tmp_path / "b"
    part.mkdir()
    (part / "finalist-0.json").write_text(json.dumps(full["finalists"][0]))  # what a killed run left
    again: list = []
    res = shortlist.short_distill_choice(_finalists(), _maker(teacher, again), cache, tokens, SETTINGS, part,
                                         Progress())
    assert again == [0.02, 0.1]  # the first finalist was not built again
    assert [r["kl_after"] for r in res["finalists"]] == [r["kl_after"] for r in full["finalists"]]
    assert res["chosen"] == full["chosen"]
    assert "short-distillation choice among 3 finalists" in shortlist.describe(res)


def test_a_finalist_record_cut_short_is_measured_again_with_a_warning(setup, tmp_path):
    # a record cut by a full disk or a bad copy is not loaded (it was a JSONDecodeError: exit 3)
    teacher, tokens, cache = setup
    full = shortlist.short_distill_choice(_finalists(), _maker(teacher, []), cache, tokens, SETTINGS, tmp_path / "a",
                                          Progress())
    part = tmp_path / "b"
    part.mkdir()
    text = json.dumps(full["finalists"][0])
    (part / "finalist-0.json").write_text(text[: len(text) // 2])
    (part / "finalist-1.json").write_text(json.dumps(full["finalists"][1]))
    again, logged = [], []
    res = shortlist.short_distill_choice(_finalists(), _maker(teacher, again), cache, tokens, SETTINGS, part,
                                         Progress(LogOnly(logged.append)))
    assert again == [0.3, 0.1]  # the cut one measured again, the whole one kept
    assert [r["kl_after"] for r in res["finalists"]] == [r["kl_after"] for r in full["finalists"]]
    assert [m for m in logged if m.startswith("warning")] == [
        f"warning: the shortlist's record {part / 'finalist-0.json'} is unreadable (JSONDecodeError); measuring that "
        "finalist again"]
    assert json.loads((part / "finalist-0.json").read_text()) == res["finalists"][0]  # rewritten whole
    assert not [p.name for p in part.iterdir() if ".tmp" in p.name]


def test_the_search_ranks_every_passing_candidate_once():
    cands = [Scored("a", "A", 0.5), Scored("b", "B", 0.2), Scored("c", "A", 0.7), Scored("d", "D", 0.9)]
    got = choose(cands, lambda c: (c.state, c.state != "D"), lambda arch: ("D2", 3), measure=lambda a: 0.4)
    assert got.arch == "B" and got.name == "b"
    # A once (c is the same architecture), D as repaired with its re-measured KL
    assert [(c.name, c.arch, c.kl) for c in got.ranked] == [("b", "B", 0.2), ("d, repaired (3 moves)", "D2", 0.4),
                                                            ("a", "A", 0.5)]


def _first_round(kls):
    rows = [{"name": f"f{i}", "kl_search": 0.1 * i, "params": 1000, "kl_before": 3.0, "kl_after": k}
            for i, k in enumerate(kls)]
    return {"finalists": rows, "chosen": min(range(len(kls)), key=lambda j: (kls[j], j)), "steps": 15, "batch": 4,
            "seq_len": 128, "validation_rows": 16, "validation_tokens": 2048, "seconds": 9.0}


def test_the_runoff_takes_the_leader_and_a_runner_up_within_the_margin():
    assert runoff.entrants(_first_round([1.0, 1.019, 1.5]), 0.02) == [0, 1]
    assert runoff.entrants(_first_round([1.5, 1.02, 1.0]), 0.02) == [2, 1]  # leader first, whatever the search's order
    assert runoff.entrants(_first_round([1.0, 1.03, 1.01]), 0.02) == [0, 2]  # the runner-up, not the next in line
    assert runoff.entrants(_first_round([1.0, 1.021]), 0.02) == []  # a clear lead needs no runoff
    assert runoff.entrants(_first_round([1.0, 1.0]), 0.0) == []  # margin 0: no runoff
    assert runoff.entrants(_first_round([1.0]), 0.02) == []


def test_the_runoff_decides_and_the_first_round_is_kept():
    first = _first_round([1.9415, 1.9454, 2.3])  # code-5070 seed 1's first round (a measured shortlist)
    picked = runoff.entrants(first, 0.02)
    second = {"finalists": [{"kl_after": 1.7018}, {"kl_after": 1.6559}], "chosen": 1, "steps": 30, "seconds": 4.0}
    res = runoff.merge(first, second, picked, 0.02)
    assert (res["chosen"], res["chosen_first_round"]) == (1, 0)
    assert res["runoff"] == {"margin": 0.02, "entrants": [0, 1], "steps": 30, "kl_after": [1.7018, 1.6559],
                             "seconds": 4.0}
    how = runoff.describe(res)
    assert how.startswith("short-distillation choice among 3 finalists (15 steps each") and ": f1, KL 3.000 -> 1.945" in how
    assert "runoff at 30 steps (f0 and f1 within 2% after 15): KL 1.702 against 1.656" in how
    assert runoff.describe(first) == shortlist.describe(first)  # no runoff: the first round's words


def test_a_runoff_distils_its_entrants_longer_on_the_same_validation_rows(setup, tmp_path):
    teacher, tokens, cache = setup
    first = shortlist.short_distill_choice(_finalists(), _maker(teacher, []), cache, tokens, SETTINGS, tmp_path / "1",
                                           Progress())
    picked = runoff.entrants(first, 10.0)  # a margin wide enough for any runner-up
    made, rec = [], Recording(cache)
    longer = SimpleNamespace(**{**vars(SETTINGS), "finalist_steps": 2 * SETTINGS.finalist_steps})
    second = shortlist.short_distill_choice([_finalists()[i] for i in picked], _maker(teacher, made), rec, tokens,
                                            longer, tmp_path / "2", Progress())
    res = runoff.merge(first, second, picked, 10.0)
    assert made == [NOISE[first["finalists"][i]["name"]] for i in picked]  # the two entrants, rebuilt from the parent
    assert second["steps"] == 10 and second["validation_rows"] == first["validation_rows"]
    # the same students before distillation: the same held-apart KL; then ten distillation steps each
    assert [second["finalists"][j]["kl_before"] for j in range(2)] == [first["finalists"][i]["kl_before"] for i in picked]
    first_held = 24 - shortlist.validation_rows(24)
    assert sum(max(r) < first_held for r in rec.reads) == 2 * 10
    assert res["chosen"] == picked[min(range(2), key=lambda j: res["runoff"]["kl_after"][j])]
