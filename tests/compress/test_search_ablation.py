"""bench/search_ablation.py's plumbing on a tiny parent: four arms built from one stage folder,
the same distillation budget, a row per arm with quality, search time and where capacity went."""

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.integration

from _benchkit import bench  # noqa: E402
from _buildkit import make_project  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _bench(name: str = "search_ablation"):
    return bench(name)


@pytest.fixture
def project(tmp_path):
    """A project folder holding the tiny parent and its spec (``_buildkit.make_project``)."""
    proj = tmp_path / "proj"
    proj.mkdir()
    make_project(proj)
    return proj


def test_arm_spec_keeps_the_contract_and_sets_one_budget():
    bench = _bench()
    text = (ROOT / "examples" / "cpu-vllm.acspec").read_text()
    out = bench.arm_spec(text, "router-refine", 1, 12, 64, 4096, "x")
    assert "strategy router-refine  seed 1  tokens 4096 tokens" in out
    assert "search  { strategy uniform  steps 20  seed 0 }" in bench.arm_spec(text, "uniform", 0, 12, 64, None, "x", 20)
    assert "distill { steps 12  seq_len 64 tokens }" in out and out.count("search") == 1
    # --search-steps is router v1's: a router v2 arm keeps its token budget
    assert "steps 20" not in bench.arm_spec(text, "router", 0, 12, 64, None, "x", 20)
    assert "steps 20" not in bench.arm_spec(text, "autocompress", 0, 12, 64, None, "x", 20)
    from autocompress.lang.api import parse_spec

    parse_spec(out, "x.acspec")  # a valid spec


def test_a_host_contract_is_built_with_one_profile_on_every_machine():
    """The host contract's budget comes from a `hardware cpu` profile; without a pinned one each
    machine's own calibration sets it, and rows built on two machines are not at equal cost."""
    bench = _bench()
    text = (ROOT / "examples" / "cpu-vllm.acspec").read_text()
    out = bench.arm_spec(text, "greedy", 1, 12, 64, None, "x")
    target = out[out.index("target {"):out.index("}", out.index("target {"))]
    assert f'profile "{bench.CPU_PROFILE.resolve()}"' in target and "hardware  cpu" in target
    assert "profile" not in bench.arm_spec(text, "greedy", 1, 12, 64, None, "x", cpu_profile=None)
    gpu = (ROOT / "examples" / "code-5070.acspec").read_text()
    assert "profile" not in bench.arm_spec(gpu, "greedy", 1, 12, 64, None, "x")
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import load_profile
    from autocompress.lang.api import parse_spec

    assert parse_spec(out, "x.acspec").target.profile == str(bench.CPU_PROFILE.resolve())
    prof = load_profile(bench.CPU_PROFILE, resolve_device("cpu"), "vllm")
    assert prof.name == "cpu-vllm-821aba6d3652" and prof.source == "measured"
    # the profile the first rows were built with, byte for byte
    assert bench.CPU_PROFILE.read_bytes() == (
        ROOT / "bench" / "results" / "cpu-vllm-readme" / "earlier-214cfce" / "profile-used.json").read_bytes()

def test_four_arms_on_a_tiny_parent(tmp_path, project):
    bench = _bench()
    work, results = tmp_path / "work", tmp_path / "results"
    rc = bench.main(["--contracts", "spec", "--steps", "2", "--seq", "32", "--search-tokens", "256", "--arms", "abcde",
                     "--examples", str(project), "--work", str(work), "--results", str(results)])
    assert rc == 0
    data = json.loads((results / "search_ablation.json").read_text())
    rows = {r["arm"]: r for r in data["rows"]}
    assert [rows[a]["strategy"] for a in "abcde"] == ["router", "greedy", "router-refine", "uniform",
                                                       "autocompress"]
    for r in rows.values():
        assert r["all_bounds_met"] and r["ppl"]["code"] > 1 and r["search_s"] is not None
        assert r["accuracy_mean"] is not None  # the fixture benchmark documents
        assert r["capacity"]["layers"] == 4
    assert "router v2" in rows["a"]["how"] and [c["name"] for c in rows["a"]["candidates"]] == ["router v2"]
    assert {c["name"] for c in rows["c"]["candidates"]} <= {"router v2", "greedy from router v2"}
    # the build report keeps the router's record: v2 for arms a and c, v1 (the prior's seed) for b
    assert rows["a"]["router"]["router"] == "v2" and rows["a"]["router"]["moved_from_prior"] >= 0
    assert rows["b"]["router"].get("router") is None and rows["b"]["router"]["steps"] > 0
    # arm e: arm b's seeds and greedy with router v2's decode in place of v1's
    names = {c["name"] for c in rows["e"]["candidates"]}
    assert "router v2" in names and "cvxpy start" in names and "router" not in names
    assert any(n.startswith("greedy (hidden") for n in names)
    assert rows["e"]["router"]["router"] == "v2" and rows["e"]["router"]["final_kl"] >= 0
    # ... and the uniform arm's measured candidates, each with the KL arm d measured (same rows), under
    # the greedy's name where the greedy already has that point (the uniform grid seed)
    uniform = {c["name"]: c["kl"] for c in rows["d"]["candidates"]}
    assert uniform and all(n.startswith("uniform: hidden") for n in uniform)
    e_kl = [c["kl"] for c in rows["e"]["candidates"]]
    assert all(kl in e_kl for kl in uniform.values())
    names = [c["name"] for c in rows["e"]["candidates"]]
    assert len(names) == len(set(names))
    md = (results / "search_ablation.md").read_text()
    assert all(md.count(f"| spec | 0 | {a} | ") == 1 for a in "abcde")
    # v1 against v2 before distillation: arm b's `router` candidate against arm a's decode
    v1 = next(c["kl"] for c in rows["b"]["candidates"] if c["name"] == "router")
    assert f"| spec | 0 | {v1:.3f} |" in md
    # every arm but d is paired with d on the same documents
    assert all("minus_uniform" in rows[a] for a in "abce") and "minus_uniform" not in rows["d"]
    assert all("minus_greedy" in rows[a] for a in "acde") and "minus_greedy" not in rows["b"]
    # a second invocation (one arm, from the stage cache) replaces its own row and keeps the others
    assert bench.main(["--contracts", "spec", "--arms", "a", "--steps", "2", "--seq", "32", "--search-tokens", "256",
                       "--examples", str(project), "--work", str(work), "--results", str(results)]) == 0
    again = json.loads((results / "search_ablation.json").read_text())["rows"]
    assert sorted(r["arm"] for r in again) == list("abcde")
    assert next(r for r in again if r["arm"] == "a")["capacity"] == rows["a"]["capacity"]


def test_spearman_against_hand_ranks():
    rank = _bench("kl_rank_correlation")
    assert rank.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert rank.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert rank.spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert rank.spearman([1, 1, 2], [5, 5, 9]) == pytest.approx(1.0)  # ties share their mean rank
    assert rank.spearman([1, 2], [1, 2]) is None and rank.spearman([1, 2, 3], [7, 7, 7]) is None


def test_rank_correlation_plumbing_on_a_tiny_parent(tmp_path, project):
    """The build's candidates first, then the uniform frontier; each distilled by the build's stage,
    exported, measured after; the summary page gathers every contract's JSON."""
    rank = _bench("kl_rank_correlation")
    results = tmp_path / "results"
    args = ["--contract", "spec", "--examples", str(project), "--candidates", "4", "--steps", "2", "--seq", "32",
            "--spec-steps", "2", "--work", str(tmp_path / "work"), "--results", str(results), "--accuracy"]
    assert rank.main(args) == 0
    data = json.loads((results / "kl_rank_correlation-spec.json").read_text())
    rows = data["rows"]
    assert 3 <= len(rows) and rows[0]["name"] == "cvxpy start" and rows[0]["source"] == "build"
    assert any(r["name"].startswith("greedy") for r in rows)
    assert len({r["shape"] + str(r["params"]) for r in rows}) == len(rows)  # no candidate twice
    assert all(r["kl_before"] >= 0 and r["after"]["code"]["ppl"] > 1 for r in rows)
    assert all(0 <= r["accuracy"]["mean"] <= 1 for r in rows)  # the fixture benchmark documents
    s = data["summary"]
    assert set(s) >= {"code.kl", "code.ppl", "8-bench mean"}
    pick = min(rows, key=lambda r: r["kl_before"])["name"]
    assert all(e["pick"] == pick and 1 <= e["pick_rank"] <= len(rows) for e in s.values())
    assert "| spec | " in (results / "kl_rank_correlation.md").read_text()
    # a second run resumes from the cached distillation and accuracy stages: the same rows
    assert rank.main(args) == 0
    again = json.loads((results / "kl_rank_correlation-spec.json").read_text())["rows"]
    assert [r["after"] for r in again] == [r["after"] for r in rows]


def test_seeds_and_contracts_pool_document_by_document(tmp_path):
    """The pooled table: each arm against b and d over every (contract, seed) where both have their
    documents, the mean held-out KL, and the arm ahead on each measure."""
    tables = _bench("ablation_tables")
    stages = tmp_path / "stages"
    rows = []
    scores = {"a": [1, 1, 0, 1], "b": [1, 0, 0, 1], "d": [0, 0, 0, 1]}
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
                kl = {"a": 0.5, "b": 0.4, "d": 0.6}[arm]
                rows.append({"contract": contract, "seed": seed, "arm": arm, "strategy": arm, "accuracy": acc,
                             "accuracy_mean": sum(sc) / 4, "kl": {"code": kl, "prose": kl}})
    rows.append({"contract": "cpu-vllm", "seed": 2, "arm": "a", "strategy": "a", "accuracy": None,
                 "accuracy_mean": None, "kl": {}})  # a run without its documents enters no difference
    entries = tables.pooled(rows, tables.run_docs(rows, tmp_path))
    by = {(e["contract"], e["arm"]): e for e in entries}
    assert [e["contract"] for e in entries][:3] == ["code-5070"] * 3 and entries[-1]["contract"] == "all"
    assert by[("all", "a")]["minus_greedy"]["diff"] == pytest.approx(0.25)
    assert by[("all", "a")]["minus_greedy"]["pairs"] == 4 and by[("all", "a")]["runs"] == 5
    assert by[("code-5070", "a")]["minus_uniform"]["diff"] == pytest.approx(0.5)
    assert "minus_greedy" not in by[("all", "b")] and "minus_uniform" not in by[("all", "d")]
    assert by[("all", "b")]["heldout_kl"] == pytest.approx(0.4)
    md = "\n".join(tables.render_pooled(entries))
    assert "| all | a | a | 5 | 0.750 | +25.0 ± 25.0 (4) | +50.0 ± 28.9 (4) | 0.500 |" in md
    assert "- all: 8-bench: a (by 25.0); held-out KL: b (by 25.0%)" in md
    assert by[("all", "a")]["chance"] == pytest.approx(0.25) and "scores 25.0 on these documents" in md


def test_a_run_without_its_documents_is_compared_unpaired_and_marked():
    """A row made on another machine has no documents here: against it, the difference of the means
    with both SEs, marked `u`; a stored paired difference is kept; a row lacking a summary gets none."""
    tables = _bench("ablation_tables")

    def row(arm, mean, se, **kw):
        return {"contract": "npc-5080", "seed": 1, "arm": arm, "strategy": arm, "accuracy_mean": mean,
                "accuracy": {"summary": {"mean": mean, "stderr": se}}, **kw}
    stored = {"diff": 0.01, "stderr": 0.011}
    rows = [row("b", 0.333, 0.014, minus_uniform=stored), row("c", 0.349, 0.0138), row("d", 0.358, 0.0139),
            {"contract": "npc-5080", "seed": 1, "arm": "a", "accuracy": None}]
    tables.paired_rows(rows, {})
    c = rows[1]
    assert c["minus_uniform"]["diff"] == pytest.approx(-0.009) and c["minus_uniform"]["unpaired"]
    assert c["minus_uniform"]["stderr"] == pytest.approx((0.0138 ** 2 + 0.0139 ** 2) ** 0.5)
    assert c["minus_greedy"]["diff"] == pytest.approx(0.016)
    assert rows[0]["minus_uniform"] is stored and "minus_uniform" not in rows[3]
    assert tables.unpaired(rows[3], rows[0]) is None
    # --with-rows: a stored table's rows of the same (contract, seed) join, this machine's arms win
    joined = _bench().joined_rows([row("b", 0.3, 0.01), row("c", 0.1, 0.01), dict(row("b", 0.3, 0.01), seed=0)],
                                  [row("c", 0.349, 0.0138)])
    assert [(r["arm"], r["seed"]) for r in joined] == [("b", 1)]


def test_runoffs_list_each_run_whose_shortlist_went_to_one():
    tables = _bench("ablation_tables")
    f = [{"name": n, "kl_after": k} for n, k in (("greedy", 1.9415), ("router v2", 1.9454), ("uniform", 2.3))]
    sl = {"finalists": f, "chosen": 1, "chosen_first_round": 0,
          "runoff": {"entrants": [0, 1], "kl_after": [1.7018, 1.6559], "steps": 30, "margin": 0.02}}
    rows = [{"contract": "code-5070", "seed": 1, "arm": "e", "shortlist": sl},
            {"contract": "code-5070", "seed": 1, "arm": "b", "shortlist": {"finalists": f, "chosen": 0}},
            {"contract": "npc-5080", "seed": 0, "arm": "a", "shortlist": None}]
    md = "\n".join(tables.runoffs(rows))
    assert "| code-5070 | 1 | e | greedy / router v2 | 1.9415 / 1.9454 | 1.7018 / 1.6559 | router v2 | yes |" in md
    assert md.count("| code-5070 |") == 1 and tables.runoffs(rows[1:]) == []


def test_chance_is_the_mean_over_tasks_of_one_over_the_choices():
    tables = _bench("ablation_tables")
    docs = ([{"task": "arc_easy", "lls": [0.0] * 4}] * 3 + [{"task": "piqa", "lls": [0.0, 0.0]}]
            + [{"task": "mmlu", "lls": [0.0] * 4}, {"task": "mmlu", "lls": [0.0] * 2}])
    assert tables.chance(docs) == pytest.approx((0.25 + 0.5 + 0.375) / 3)


def test_shortlist_horizon_reruns_the_shortlist_at_longer_horizons(tmp_path, project):
    """bench/shortlist_horizon.py: the built arm's finalists of least KL after its short distillation,
    distilled again for each horizon with the shortlist's own function; the build's row is its first column."""
    bench, horizon = _bench(), _bench("shortlist_horizon")
    work, results = tmp_path / "work", tmp_path / "results"
    assert bench.main(["--contracts", "spec", "--steps", "8", "--seq", "32", "--search-tokens", "256", "--arms", "e",
                       "--examples", str(project), "--work", str(work), "--results", str(results)]) == 0
    row = json.loads((results / "search_ablation.json").read_text())["rows"][0]
    short = row["shortlist"]
    if not short or len(short["finalists"]) < 2:
        pytest.skip("the tiny parent's search listed one finalist")
    assert horizon.main(["--arm", "spec-s0-e", "--horizons", "4", "--top", "2", "--work", str(work),
                         "--results", str(results)]) == 0
    data = json.loads((results / "shortlist_horizon.json").read_text())
    r = data["rows"][0]
    build = str(short["steps"])
    best2 = sorted(short["finalists"], key=lambda f: f["kl_after"])[:2]
    assert r["finalists"] == [f["name"] for f in best2]
    assert r["kl_after"][build] == [f["kl_after"] for f in best2]  # the build's own result, read
    assert len(r["kl_after"]["4"]) == 2 and all(k > 0 for k in r["kl_after"]["4"])
    assert r["chosen_at"][build] == best2[0]["name"]
    assert f"| spec-s0-e | {best2[0]['name']} |" in (results / "shortlist_horizon.md").read_text()
