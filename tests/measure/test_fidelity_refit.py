"""The fidelity benchmark's refit (bench/lib/fidelity_refit.py): the rank correlation, the cells whose passes agree, the
share of KV-reduced layers, and the run's own fit in the fitter's flat form."""

import statistics
from types import SimpleNamespace

import pytest

from bench.lib import fidelity_refit


def _refit():
    return fidelity_refit


def test_spearman_ranks_ties_at_their_mean_and_sees_order_not_size():
    r = _refit()
    assert r.spearman([1, 2, 3, 4], [10, 20, 30, 1000]) == pytest.approx(1.0)
    assert r.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # x ties on its first two: ranks 0.5, 0.5, 2, 3 against 0, 1, 2, 3 -> Pearson of the ranks
    assert r.spearman([0, 0, 1, 2], [1, 2, 3, 4]) == pytest.approx(0.9486833, rel=1e-6)
    assert r.spearman([1, 1, 1], [1, 2, 3]) is None  # no order to rank


def test_only_cells_whose_passes_agree_are_kept_in_order():
    r = _refit()
    held = [{"arch": SimpleNamespace(name=n), "result": {"measurements": [{"workload": "short"}, {"workload": "long"}]}}
            for n in ("a", "b")]
    ratio = {n: {w: {"tpot_s": 0.5, "e2e_s": 0.5, "ttft_s": 0.5, "throughput_tok_s": 2.0} for w in ("short", "long")}
             for n in ("a", "b")}
    spread = {"a": {"short": {"tpot_s": 0.01, "e2e_s": 0.2, "ttft_s": 0.0, "throughput_tok_s": 0.05},
                    "long": {"tpot_s": 0.04, "e2e_s": 0.0, "ttft_s": 0.0, "throughput_tok_s": 0.5}},
              "b": {"short": {"tpot_s": 0.0, "e2e_s": 0.0, "ttft_s": 0.0, "throughput_tok_s": 0.0},
                    "long": {"tpot_s": 0.5, "e2e_s": 0.0, "ttft_s": 0.0, "throughput_tok_s": 0.0}}}
    inter = SimpleNamespace(ratio=ratio, spread=spread)
    errs = {"tpot": [0.1, 0.2, 0.3, 0.4], "e2e": [0.1, 0.2, 0.3, 0.4], "throughput": [0.1, 0.2, 0.3, 0.4]}
    out = r.stable_only(errs, held, inter, 0.05)  # within 5% of the ratio: 0.025 of 0.5, 0.1 of 2.0
    assert out["tpot"] == [0.1, 0.3]  # a/long (0.04) and b/long (0.5) spread too much
    assert out["e2e"] == [0.2, 0.3, 0.4]
    assert out["throughput"] == [0.1, 0.3, 0.4]


def test_the_kv_share_counts_attention_layers_only_and_the_own_fit_is_flat():
    r = _refit()
    blocks = [SimpleNamespace(mixer=SimpleNamespace(kv_heads=k) if k else None) for k in (1, 3, None, 1)]
    assert r.fewer_kv_share(SimpleNamespace(blocks=blocks), 3) == pytest.approx(2 / 3)
    fitted = {"per_op": {"gemm": {"compute": 2.0, "memory": 1.5}}, "kernel": {"launch_s": 5e-6}}
    assert r.own_params(fitted) == {"gemm.compute": 2.0, "gemm.memory": 1.5, "launch_s": 5e-6}


def test_triples_pair_each_model_run_with_its_neighbouring_references_and_disagreeing_ones_drop():
    r = _refit()

    def run(model, tpot):
        return {"model": model, "medians": {"short": {"tpot_s": tpot}}}
    # pass 1: R 10, A 5, R 10.5 (agree within 5%); a seam; pass 2: R 10, A 9, R 14 (disagree by 33%); B
    runs = [run("R", 10.0), run("A", 5.0), run("R", 10.5), run("R", 10.0), run("A", 9.0), run("R", 14.0),
            run("R", 8.0), run("B", 4.0), run("R", 8.0)]
    inter = SimpleNamespace(reference="R", runs=runs, ratio={"A": {"short": {"tpot_s": 0.625}},
                                                            "B": {"short": {"tpot_s": 0.5}}})
    t = r.triples_of(inter)
    assert [(g["short"]["tpot_s"], b["short"]["tpot_s"], a["short"]["tpot_s"]) for g, b, a in t["A"]] == \
        [(5.0, 10.0, 10.5), (9.0, 10.0, 14.0)]  # pass 2's left neighbour is the seam, not pass 1's last
    ratio, kept = r.ref_agreeing(inter, 0.10)
    assert ratio["A"]["short"]["tpot_s"] == pytest.approx(5.0 / 10.25) and kept[("A", "short", "tpot_s")]  # pass 2 dropped
    assert inter.ratio["A"]["short"]["tpot_s"] == 0.625  # the stored run is not changed
    ratio, kept = r.ref_agreeing(inter, 0.0)
    assert not kept[("A", "short", "tpot_s")] and kept[("B", "short", "tpot_s")]  # equal references agree at 0



def test_two_runs_merge_like_two_passes_each_triple_against_its_own_references():
    r = _refit()
    from autocompress.measure.interleave import METRICS, Interleaved

    def run(model, tpot):
        return {"model": model, "medians": {"short": {k: tpot for k in METRICS}}}

    def inter(runs):
        ref = {"short": {k: statistics.fmean(x["medians"]["short"][k] for x in runs if x["model"] == "R") for k in METRICS}}
        return Interleaved("R", {"R": ref}, {"R": {"short": {k: 1.0 for k in METRICS}}}, {}, {"R": 100, "A": 50}, runs=runs)
    # run 1 (fast host): R 10, A 5, R 10 -> 0.5; run 2, hours later and slower: R 20, A 12, R 20 -> 0.6
    m = r.merged([inter([run("R", 10.0), run("A", 5.0), run("R", 10.0)]),
                  inter([run("R", 20.0), run("A", 12.0), run("R", 20.0)])])
    assert m.ratio["A"]["short"]["tpot_s"] == pytest.approx(0.55)  # the host's change between runs cancels
    assert m.spread["A"]["short"]["tpot_s"] == pytest.approx(0.1)
    assert m.absolute["A"]["short"]["tpot_s"] == pytest.approx(8.5) and m.absolute["R"]["short"]["tpot_s"] == 15.0
    assert len(m.runs) == 6 and m.peak_memory == {"R": 100, "A": 50}
