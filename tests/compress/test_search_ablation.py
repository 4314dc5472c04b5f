"""The quality benchmark's arms (bench/lib/arms.py) on a tiny parent: the arms built from one stage
folder, the same distillation budget, a row per arm with quality, search time and where capacity
went; and its tables (bench/lib/arm_tables.py)."""

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.integration

from _buildkit import make_project  # noqa: E402

from bench import quality  # noqa: E402
from bench.lib import arm_tables, arms, stats  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path):
    """A project folder holding the tiny parent and its spec (``_buildkit.make_project``)."""
    proj = tmp_path / "proj"
    proj.mkdir()
    make_project(proj)
    return proj


def test_arm_spec_keeps_the_contract_and_sets_one_budget():
    bench = arms
    text = (ROOT / "examples" / "cpu-vllm.acspec").read_text()
    out = bench.arm_spec(text, "router-refine", 1, 12, 64, 4096, "x")
    assert "strategy router-refine  seed 1  tokens 4096 tokens" in out
    assert "search  { strategy uniform  steps 20  seed 0 }" in bench.arm_spec(text, "uniform", 0, 12, 64, None, "x", 20)
    assert "distill { steps 12  seq_len 64 tokens }" in out and out.count("search") == 1
    # --search-steps is the uniform arm's: a router v2 arm keeps its token budget
    assert "steps 20" not in bench.arm_spec(text, "router", 0, 12, 64, None, "x", 20)
    assert "steps 20" not in bench.arm_spec(text, "autocompress", 0, 12, 64, None, "x", 20)
    from autocompress.lang.api import parse_spec

    parse_spec(out, "x.acspec")  # a valid spec


def test_a_host_contract_is_built_with_one_profile_on_every_machine(tmp_path):
    """The host contract's budget comes from a `hardware cpu` profile; without a pinned one each
    machine's own calibration sets it, and rows built on two machines are not at equal cost."""
    pinned = tmp_path / "cpu-profile.json"
    text = (ROOT / "examples" / "cpu-vllm.acspec").read_text()
    out = arms.arm_spec(text, "autocompress", 1, 12, 64, None, "x", cpu_profile=pinned)
    target = out[out.index("target {"):out.index("}", out.index("target {"))]
    assert f'profile "{pinned.resolve()}"' in target and "hardware  cpu" in target
    assert "profile" not in arms.arm_spec(text, "autocompress", 1, 12, 64, None, "x", cpu_profile=None)
    gpu = (ROOT / "examples" / "code-5070.acspec").read_text()
    assert "profile" not in arms.arm_spec(gpu, "autocompress", 1, 12, 64, None, "x", cpu_profile=pinned)
    from autocompress.lang.api import parse_spec

    assert parse_spec(out, "x.acspec").target.profile == str(pinned.resolve())
    # by default, the profile the stored rows were built with
    assert arms.arm_spec(text, "uniform", 1, 12, 64, None, "x").count(str(arms.CPU_PROFILE.resolve())) == 1

def test_four_arms_on_a_tiny_parent(tmp_path, project):
    work, results = tmp_path / "work", tmp_path / "results"
    argv = ["arms", "--contracts", "spec", "--steps", "2", "--seq", "32", "--search-tokens", "256",
            "--examples", str(project), "--work", str(work), "--results", str(results)]
    assert quality.main(argv) == 0
    data = json.loads((results / "arms.json").read_text())
    rows = {r["arm"]: r for r in data["rows"]}
    assert sorted(rows) == sorted(arms.ARMS) and all(r["strategy"] == a for a, r in rows.items())
    for r in rows.values():
        assert r["all_bounds_met"] and r["ppl"]["code"] > 1 and r["search_s"] is not None
        assert r["accuracy_mean"] is not None  # the fixture benchmark documents
        assert r["capacity"]["layers"] == 4
    assert "router v2" in rows["router"]["how"] and [c["name"] for c in rows["router"]["candidates"]] == ["router v2"]
    assert {c["name"] for c in rows["router-refine"]["candidates"]} <= {"router v2", "greedy from router v2"}
    # the build report keeps the router's record
    assert rows["router"]["router"]["router"] == "v2" and rows["router"]["router"]["moved_from_prior"] >= 0
    assert rows["autocompress"]["router"]["router"] == "v2" and rows["autocompress"]["router"]["final_kl"] >= 0
    # ... and the uniform arm's measured candidates, each with the KL the uniform arm measured (same rows)
    uniform = {c["name"]: c["kl"] for c in rows["uniform"]["candidates"]}
    assert uniform and all(n.startswith("uniform: hidden") for n in uniform)
    e_kl = [c["kl"] for c in rows["autocompress"]["candidates"]]
    assert all(kl in e_kl for kl in uniform.values())
    names = [c["name"] for c in rows["autocompress"]["candidates"]]
    assert len(names) == len(set(names))
    md = (results / "arms.md").read_text()
    assert all(md.count(f"| spec | 0 | {a} | ") == 1 for a in arms.ARMS)
    assert "`python -m bench.quality arms --contracts spec" in md
    # every arm but the uniform one is paired with it on the same documents
    assert all("minus_uniform" in rows[a] for a in arms.ARMS if a != "uniform")
    assert "minus_uniform" not in rows["uniform"]
    # a second invocation (one arm, from the stage cache) replaces its own row and keeps the others
    assert quality.main(argv[:1] + ["--arms", "router"] + argv[1:]) == 0
    again = json.loads((results / "arms.json").read_text())["rows"]
    assert sorted(r["arm"] for r in again) == sorted(arms.ARMS)
    assert next(r for r in again if r["arm"] == "router")["capacity"] == rows["router"]["capacity"]


def test_spearman_against_hand_ranks():
    rank = stats
    assert rank.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert rank.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert rank.spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert rank.spearman([1, 1, 2], [5, 5, 9]) == pytest.approx(1.0)  # ties share their mean rank
    assert rank.spearman([1, 2], [1, 2]) is None and rank.spearman([1, 2, 3], [7, 7, 7]) is None


def test_seeds_and_contracts_pool_document_by_document(tmp_path):
    """The pooled table: each arm against the uniform arm over every (contract, seed) where both have
    their documents, the mean held-out KL, and the arm ahead on each measure."""
    tables = arm_tables
    stages = tmp_path / "stages"
    rows = []
    scores = {"router": [1, 1, 0, 1], "autocompress": [1, 0, 0, 1], "uniform": [0, 0, 0, 1]}
    for contract in ("code-5070", "cpu-vllm"):
        for seed in (0, 1):
            for arm, sc in scores.items():
                acc = {"summary": {"mean": sum(sc) / 4}, "who": [contract, seed, arm]}
                folder = stages / f"accuracy-{contract}{seed}{arm}"
                folder.mkdir(parents=True)
                (folder / "accuracy.json").write_text(json.dumps(acc))
                (folder / "per_doc.jsonl").write_text("".join(
                    json.dumps({"task": "arc_easy", "doc": i, "acc": float(x), "acc_norm": 0.0, "lls": [0.0] * 4})
                    + "\n"
                    for i, x in enumerate(sc)))
                (folder / "DONE").write_text("{}")
                kl = {"router": 0.5, "autocompress": 0.4, "uniform": 0.6}[arm]
                rows.append({"contract": contract, "seed": seed, "arm": arm, "strategy": arm, "accuracy": acc,
                             "accuracy_mean": sum(sc) / 4, "kl": {"code": kl, "prose": kl}})
    rows.append({"contract": "cpu-vllm", "seed": 2, "arm": "router", "strategy": "router", "accuracy": None,
                 "accuracy_mean": None, "kl": {}})  # a run without its documents enters no difference
    entries = tables.pooled(rows, tables.run_docs(rows, tmp_path))
    by = {(e["contract"], e["arm"]): e for e in entries}
    assert [e["contract"] for e in entries][:3] == ["code-5070"] * 3 and entries[-1]["contract"] == "all"
    assert by[("all", "autocompress")]["minus_uniform"]["diff"] == pytest.approx(0.25)
    assert by[("all", "autocompress")]["minus_uniform"]["pairs"] == 4 and by[("all", "router")]["runs"] == 5
    assert by[("code-5070", "router")]["minus_uniform"]["diff"] == pytest.approx(0.5)
    assert "minus_uniform" not in by[("all", "uniform")]
    assert by[("all", "autocompress")]["heldout_kl"] == pytest.approx(0.4)
    md = "\n".join(tables.render_pooled(entries))
    assert "| all | router | 5 | 0.750 | +50.0 ± 28.9 (4) | 0.500 |" in md
    assert "- all: 8-bench: router (by 25.0); held-out KL: autocompress (by 25.0%)" in md
    assert by[("all", "router")]["chance"] == pytest.approx(0.25) and "scores 25.0 on these documents" in md


def test_a_run_without_its_documents_is_compared_unpaired_and_marked():
    """A row made on another machine has no documents here: against it, the difference of the means
    with both SEs, marked `u`; a stored paired difference is kept; a row lacking a summary gets none."""
    tables = arm_tables

    def row(arm, mean, se, **kw):
        return {"contract": "npc-5080", "seed": 1, "arm": arm, "strategy": arm, "accuracy_mean": mean,
                "accuracy": {"summary": {"mean": mean, "stderr": se}}, **kw}
    stored = {"diff": 0.01, "stderr": 0.011}
    rows = [row("autocompress", 0.333, 0.014, minus_uniform=stored), row("router-refine", 0.349, 0.0138),
            row("uniform", 0.358, 0.0139), {"contract": "npc-5080", "seed": 1, "arm": "router", "accuracy": None}]
    tables.paired_rows(rows, {})
    c = rows[1]
    assert c["minus_uniform"]["diff"] == pytest.approx(-0.009) and c["minus_uniform"]["unpaired"]
    assert c["minus_uniform"]["stderr"] == pytest.approx((0.0138 ** 2 + 0.0139 ** 2) ** 0.5)
    assert rows[0]["minus_uniform"] is stored and "minus_uniform" not in rows[3]
    assert tables.unpaired(rows[3], rows[0]) is None
    # --with-rows: a stored table's rows of the same (contract, seed) join, this machine's arms win
    joined = arms.joined_rows([row("autocompress", 0.3, 0.01), row("router-refine", 0.1, 0.01),
                               dict(row("autocompress", 0.3, 0.01), seed=0)], [row("router-refine", 0.349, 0.0138)])
    assert [(r["arm"], r["seed"]) for r in joined] == [("autocompress", 1)]


def test_stored_rows_name_their_arms_by_strategy_and_drop_the_removed_ones():
    old = [{"arm": "a", "strategy": "router"}, {"arm": "b", "strategy": "greedy"}, {"arm": "e", "strategy": "autocompress"}]
    assert [r["arm"] for r in arms.named(old)] == ["router", "autocompress"]


def test_runoffs_list_each_run_whose_shortlist_went_to_one():
    tables = arm_tables
    f = [{"name": n, "kl_after": k} for n, k in (("greedy", 1.9415), ("router v2", 1.9454), ("uniform", 2.3))]
    sl = {"finalists": f, "chosen": 1, "chosen_first_round": 0,
          "runoff": {"entrants": [0, 1], "kl_after": [1.7018, 1.6559], "steps": 30, "margin": 0.02}}
    rows = [{"contract": "code-5070", "seed": 1, "arm": "autocompress", "shortlist": sl},
            {"contract": "code-5070", "seed": 1, "arm": "router-refine", "shortlist": {"finalists": f, "chosen": 0}},
            {"contract": "npc-5080", "seed": 0, "arm": "router", "shortlist": None}]
    md = "\n".join(tables.runoffs(rows))
    assert "| code-5070 | 1 | autocompress | greedy / router v2 | 1.9415 / 1.9454 | 1.7018 / 1.6559 | router v2 | yes |" in md
    assert md.count("| code-5070 |") == 1 and tables.runoffs(rows[1:]) == []


def test_chance_is_the_mean_over_tasks_of_one_over_the_choices():
    docs = ([{"task": "arc_easy", "lls": [0.0] * 4}] * 3 + [{"task": "piqa", "lls": [0.0, 0.0]}]
            + [{"task": "mmlu", "lls": [0.0] * 4}, {"task": "mmlu", "lls": [0.0] * 2}])
    assert arm_tables.chance(docs) == pytest.approx((0.25 + 0.5 + 0.375) / 3)
