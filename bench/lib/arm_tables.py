"""The tables of the quality benchmark's arms (``bench.lib.arms``): the paired benchmark differences
against the uniform arm, the pooled table, the runoffs, and the page itself. Reads rows only
(``rows.json``'s), runs nothing. An arm is named by its search strategy.
"""

from __future__ import annotations

from pathlib import Path

# the example contracts, in the order the script runs them and the tables list them
CONTRACTS = ("code-5070", "npc-5080", "serve-h100", "cpu-vllm")
UNIFORM = "uniform"  # the fair uniform arm, the reference of every paired difference


def run_docs(rows: list[dict], work: Path) -> dict[tuple, list | None]:
    """(contract, seed, arm) -> the run's benchmark ``per_doc`` rows (None where its accuracy stage
    is not in ``work``): read once, for the per-run and the pooled differences."""
    from autocompress.evaluate.benchmarks.paired import per_doc_path, read_rows

    out = {}
    for r in rows:
        path = per_doc_path(r["accuracy"], work / "stages") if r.get("accuracy") else None
        out[(r["contract"], r["seed"], r["arm"])] = read_rows(path) if path else None
    return out


def paired_rows(rows: list[dict], docs: dict[tuple, list | None]) -> None:
    """Each arm's eight-benchmark mean minus the uniform arm's of its contract and seed, on the same
    documents (``accuracy.paired``), where both runs have their documents (``run_docs``); else
    unpaired (``unpaired``)."""
    from autocompress.evaluate.benchmarks.paired import paired_difference

    by = {(r["contract"], r["seed"], r["arm"]): r for r in rows}
    ref, key = UNIFORM, "minus_uniform"
    for r in rows:
        a, b = docs.get((r["contract"], r["seed"], r["arm"])), docs.get((r["contract"], r["seed"], ref))
        if r["arm"] != ref and a and b:
            diff = paired_difference(a, b)
            r[key] = {"diff": diff["diff"], "stderr": diff["stderr"]}
        elif r["arm"] != ref and not r.get(key) and (o := by.get((r["contract"], r["seed"], ref))) \
                and (u := unpaired(r, o)):
            r[key] = u


def unpaired(a: dict, b: dict) -> dict | None:
    """``a``'s eight-benchmark mean minus ``b``'s where their documents' rows are not both at hand
    (a run made on another machine, whose stage folder is gone): the difference of the means with
    SE sqrt(SE_a^2 + SE_b^2). The runs score the same documents, so their scores correlate and this
    SE overstates the paired one (about 2 points on the ablation's rows, against 1.0-1.7 paired); marked ``unpaired``."""
    sa, sb = ((x.get("accuracy") or {}).get("summary") or {} for x in (a, b))
    if sa.get("mean") is None or sb.get("mean") is None:
        return None
    return {"diff": sa["mean"] - sb["mean"], "stderr": (sa["stderr"] ** 2 + sb["stderr"] ** 2) ** 0.5, "unpaired": True}


def pooled(rows: list[dict], docs: dict[tuple, list | None]) -> list[dict]:
    """Per contract (and over all contracts) and arm, its rows pooled over seeds: the mean
    eight-benchmark score, the paired difference to the uniform arm pooled document by document
    (``accuracy.paired.pooled_difference``: the seeds and contracts score the same documents, so
    their SEs are not independent), and the mean held-out KL to the parent after distillation
    ((code + prose) / 2, what the distillation minimises). Only (contract, seed) pairs where both
    arms have their documents (``run_docs``) enter a difference."""
    from autocompress.evaluate.benchmarks.paired import pooled_difference

    out = []
    floor = next((chance(d) for d in docs.values() if d), None)
    order = {c: i for i, c in enumerate(CONTRACTS)}
    contracts = sorted(dict.fromkeys(r["contract"] for r in rows), key=lambda c: (order.get(c, len(order)), c))
    for contract in contracts + ["all"]:
        mine = [r for r in rows if contract in ("all", r["contract"])]
        for arm in sorted({r["arm"] for r in mine}):
            own = [r for r in mine if r["arm"] == arm]
            entry = {"contract": contract, "arm": arm, "chance": floor,
                     "runs": len(own), "seeds": sorted({r["seed"] for r in own})}
            acc = [r["accuracy_mean"] for r in own if r.get("accuracy_mean") is not None]
            entry["accuracy_mean"] = sum(acc) / len(acc) if acc else None
            kls = [(r["kl"]["code"] + r["kl"]["prose"]) / 2 for r in own if {"code", "prose"} <= set(r.get("kl") or {})]
            entry["heldout_kl"] = sum(kls) / len(kls) if kls else None
            pairs = [(a, b) for r in own if arm != UNIFORM
                     and (a := docs.get((r["contract"], r["seed"], arm)))
                     and (b := docs.get((r["contract"], r["seed"], UNIFORM)))]
            if pairs:
                d = pooled_difference(pairs)
                entry["minus_uniform"] = {"diff": d["diff"], "stderr": d["stderr"], "pairs": len(pairs)}
            out.append(entry)
    return out


def chance(docs: list[dict]) -> float:
    """The eight-task mean a uniformly random pick scores on these documents (per task, the mean of
    1 / choices; the mean over tasks), from one run's ``per_doc`` rows: a model near it is at the
    benchmarks' floor, where differences between models are noise."""
    by_task: dict[str, list[float]] = {}
    for r in docs:
        by_task.setdefault(r["task"], []).append(1 / len(r["lls"]))
    return sum(sum(v) / len(v) for v in by_task.values()) / len(by_task)


def render_pooled(entries: list[dict]) -> list[str]:
    """The pooled table, and per contract the arm ahead on each measure."""
    if not entries or max(e["runs"] for e in entries) < 2:
        return []

    def p(m):
        return f"{100 * m['diff']:+.1f} ± {100 * m['stderr']:.1f} ({m['pairs']})" if m else "-"

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)
    out = ["", "Pooled over seeds (and, in the `all` rows, over contracts): the paired differences are pooled "
           "document by document (the runs score the same documents; `accuracy.paired.pooled_difference`), with "
           "the number of (contract, seed) pairs in brackets; held-out KL is the mean over runs of (code + prose) / 2 "
           "after distillation."
           + (f" A uniformly random pick scores {100 * entries[0]['chance']:.1f} on these documents (per task 1 / "
              "choices): an 8-bench mean within a point or two of it is the benchmarks' floor, where they cannot "
              "separate models." if entries[0].get("chance") else ""), "",
           "| contract | arm | runs | 8-bench mean | minus uniform, pooled | held-out KL |",
           "|---|---|---|---|---|---|"]
    for e in entries:
        out.append(f"| {e['contract']} | {e['arm']} | {e['runs']} | {f(e['accuracy_mean'], '.3f')} | "
                   f"{p(e.get('minus_uniform'))} | {f(e['heldout_kl'], '.3f')} |")
    out += ["", "Ahead on each measure (pooled): the arm with the highest 8-bench mean and the arm with the least "
            "held-out KL; `by` is the gap to the next arm, in points (8-bench) or relative (KL).", ""]
    for contract in dict.fromkeys(e["contract"] for e in entries):
        mine = [e for e in entries if e["contract"] == contract]
        parts = []
        for label, key, sign, gap in (("8-bench", "accuracy_mean", -1, lambda x, y: f"{100 * (x - y):.1f}"),
                                      ("held-out KL", "heldout_kl", 1, lambda x, y: f"{100 * (y / x - 1):.1f}%")):
            vals = sorted({e[key] for e in mine if e[key] is not None}, key=lambda v: sign * v)
            if len({e["arm"] for e in mine if e[key] is not None}) > 1:
                lead = ", ".join(sorted(e["arm"] for e in mine if e[key] == vals[0]))
                parts.append(f"{label}: {lead} (by {gap(vals[0], vals[1] if len(vals) > 1 else vals[0])})")
        out.append(f"- {contract}: " + "; ".join(parts))
    return out


def runoffs(rows: list[dict]) -> list[str]:
    """The shortlist's runoffs (``build.runoff``): per run, the two entrants' KL after the short
    distillation and after the runoff's longer one, and whether the runoff overturned the first round."""
    out = []
    for r in rows:
        sl = r.get("shortlist") or {}
        ro = sl.get("runoff")
        if not ro:
            continue
        f = sl["finalists"]
        a, b = ro["entrants"]
        out.append(f"| {r['contract']} | {r['seed']} | {r['arm']} | {f[a]['name']} / {f[b]['name']} | "
                   f"{f[a]['kl_after']:.4f} / {f[b]['kl_after']:.4f} | {ro['kl_after'][0]:.4f} / {ro['kl_after'][1]:.4f} | "
                   f"{f[sl['chosen']]['name']} | {'yes' if sl['chosen'] != sl['chosen_first_round'] else 'no'} |")
    if not out:
        return []
    return ["", "Runoffs (the shortlist's leader and a runner-up within the margin after the short distillation, "
            "distilled again for twice the steps; the least KL after it is built):", "",
            "| contract | seed | arm | leader / runner-up | KL after the short distillation | after the runoff | built | "
            "overturned |", "|---|---|---|---|---|---|---|---|", *out]


def render(rows: list[dict], meta: dict) -> str:
    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    order = {c: i for i, c in enumerate(CONTRACTS)}  # contracts as the script lists them, then seed, then arm
    rows = sorted(rows, key=lambda r: (order.get(r["contract"], len(order)), r["contract"], r["seed"], r["arm"]))

    out = ["# Quality at equal cost: the search's arms against the uniform arm", "",
           ("**Search stage only (no distillation): quality columns are empty; the candidates' KL is before "
            "distillation.** " if meta.get("search_only") else "") +
           f"Distillation {meta['steps']} steps x seq_len {meta['seq']} (the build's default batch), seeds "
           f"{meta['seeds']}; router v2 budget {meta['search_tokens'] or 'derived (a quarter of distillation, at least 64 steps)'}"
           " tokens. Rows add up over invocations (one contract per run), each names its commit and time; the "
           "last command: " + meta["command"], "",
           "minus uniform, paired: the arm's eight-benchmark mean minus the fair uniform arm's on the same documents, "
           "in points, ± the SE of that paired difference (`autocompress.evaluate.benchmarks.paired`); `u`: unpaired, "
           "where the other run's documents are not in this machine's stage folder (the difference of the two means, "
           "a wider SE; `arm_tables.unpaired`).", "",
           "| contract | seed | arm | 8-bench mean | minus uniform, paired | ppl code | "
           "ppl prose | KL code | search s | hidden | attn kept | FFN kept | mean FFN | params M | bounds | made at |",
           "|" + "---|" * 16]

    def paired(m):  # "u": unpaired (``unpaired``), the other run's documents were not at hand
        return f"{100 * m['diff']:+.1f} ± {100 * m['stderr']:.1f}{' u' if m.get('unpaired') else ''}" if m else "-"
    for r in rows:
        c = r["capacity"]
        out.append(f"| {r['contract']} | {r['seed']} | {r['arm']} | {f(r['accuracy_mean'], '.3f')} | "
                   f"{paired(r.get('minus_uniform'))} | "
                   f"{f(r['ppl'].get('code'), '.2f')} | {f(r['ppl'].get('prose'), '.2f')} | "
                   f"{f(r['kl'].get('code'), '.3f')} | {f(r['search_s'], '.0f')} | {c['hidden']} | "
                   f"{c['attention_kept']}/{c['layers']} | {c['ffn_kept']}/{c['layers']} | "
                   f"{f(c['ffn_mean_width'], '.0f')} | {c['params'] / 1e6:.2f} | {'met' if r['all_bounds_met'] else 'NOT met'} | "
                   f"{r.get('commit', '-')} {r.get('written', '')} |")
    out += ["", "How each arm chose (the build report's `how`):", ""]
    out += [f"- {r['contract']} s{r['seed']} ({r['arm']}): {r['how']}" + (
        f" (the search alone: {r['how_search']})" if r.get("how_search") else "") for r in rows]
    out += runoffs(rows)
    out += render_pooled(meta.get("pooled") or [])
    moved = [r for r in rows if (r.get("router") or {}).get("router") == "v2"]
    if moved:
        out += ["", "Router v2 (choices of its decode that differ from its prior, the cvxpy point where no prior is "
                "named; changes that brought its argmax within the cost tables and that spent its slack; KD loss "
                "first -> last step):", ""]
        for r in moved:
            s = r["router"]
            prior = s.get("prior", "cvxpy point")
            kept = "" if "learn_hidden" not in s else (", hidden learned" if s["learn_hidden"] else ", hidden kept")
            out.append(f"- {r['contract']} s{r['seed']} ({r['arm']}): prior the {prior}{kept}; "
                       f"{s['moved_from_prior']} choices moved, {s.get('decode_moves', 0)} + "
                       f"{s.get('decode_fills', 0)} decode changes, "
                       f"{s['steps']} steps, {s['tokens']} tokens, {s['seconds']} s; cvxpy point's KL "
                       f"{s.get('prior_kl', float('nan')):.3f}, the search's choice's (before the shortlist) {s.get('final_kl', float('nan')):.3f}; KD "
                       f"{s['first']['quality']:.3f} -> {s['last']['quality']:.3f}")
    return "\n".join(out) + "\n"
