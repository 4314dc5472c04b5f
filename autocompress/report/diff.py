"""What a spec change did: two feasibility reports side by side (``acc diff``), as a dict, Markdown
for a pull-request comment, or JSON (``specs/spec-diff.schema.json``). Pure functions.

A side is a checked spec (its feasibility report), a spec that is absent (added or deleted by the
change) or an invalid one (its rendered errors). For each bound of either contract: the bound
old and new (tighter or looser), the parent's and the starting point's predictions, and whether it
binds; then which bounds became binding or stopped binding, the target and parent changes, the
starting architectures and the memory they need.
"""

from __future__ import annotations

import json

from autocompress import __version__
from autocompress.report.feasibility import VERDICT_TEXT, MiB, fmt_value, layer_runs

SCHEMA_ID = "autocompress/spec-diff/v1"
TARGET_FIELDS = ("hardware", "engine", "weight_precision", "kv_precision", "tensor_parallel", "memory_limit_bytes")


def side(label: str, status: str, report: dict | None = None, errors: tuple[str, ...] = ()) -> dict:
    """One side of a diff: ``status`` "checked" (with its report), "absent" or "invalid" (with errors)."""
    assert status in ("checked", "absent", "invalid") and (report is not None) == (status == "checked")
    return {"label": label, "status": status, "report": report, "errors": list(errors)}


def _summary(s: dict) -> dict:
    r = s["report"]
    return {"label": s["label"], "status": s["status"], "verdict": r["verdict"] if r else None,
            "reason": r.get("reason") if r else None, "spec_sha256": r["spec"]["sha256"] if r else None,
            "errors": s["errors"]}


def _cell(r: dict | None, name: str) -> dict | None:
    if r is None:
        return None
    p = next((c for c in r["parent_costs"]["checks"] if c["name"] == name), None)
    if p is None:
        return None
    st = next((c for c in r["start"]["checks"] if c["name"] == name), None) if r.get("start") else None
    return {"op": p["op"], "bound": p["bound"], "parent": p["predicted"], "parent_ok": p["ok"],
            "start": st["predicted"] if st else None, "start_ok": st["ok"] if st else None,
            "binding": name in r["binding"]}


def _change(old: dict | None, new: dict | None) -> str:
    if old is None:
        return "added"
    if new is None:
        return "removed"
    if old["op"] != new["op"]:
        return "changed"
    if old["bound"] == new["bound"]:
        return "same"
    tighter = new["bound"] < old["bound"] if new["op"] == "<=" else new["bound"] > old["bound"]
    return "tightened" if tighter else "loosened"


def _arch(r: dict | None) -> dict | None:
    if not r or not r.get("start"):
        return None
    a = r["start"]["architecture"]
    return {"hidden": a["hidden"], "params": a["params"], "importance_kept": a.get("importance_kept"),
            "mixers": sum(1 for layer in a["layers"] if layer["mixer"]),
            "ffns": sum(1 for layer in a["layers"] if layer["ffn"]),
            "layers": [list(run) for run in layer_runs(a)],
            "uniform_params": r["uniform"]["architecture"]["params"] if r.get("uniform") else None}


def build_diff(old: dict, new: dict) -> dict:
    """The diff of two sides (``side``)."""
    ro, rn = old["report"], new["report"]
    names = []
    for r in (ro, rn):
        for c in (r["parent_costs"]["checks"] if r else []):
            if c["name"] not in names:
                names.append(c["name"])
    bounds = []
    for name in names:
        co, cn = _cell(ro, name), _cell(rn, name)
        metric = next(c["metric"] for r in (ro, rn) if r for c in r["parent_costs"]["checks"] if c["name"] == name)
        bounds.append({"name": name, "metric": metric, "old": co, "new": cn, "change": _change(co, cn)})
    bo, bn = (list(r["binding"]) if r else [] for r in (ro, rn))
    to, tn = ((r["target"] if r else None) for r in (ro, rn))
    par = [{"name": r["parent"]["name"], "description": r["parent"]["description"],
            "params": r["parent"]["architecture"]["params"]} if r else None for r in (ro, rn)]
    mem = [({"total": (r["start"] or r["parent_costs"])["memory"]["total"],
             "limit": (r["start"] or r["parent_costs"])["memory"]["limit"],
             "of": "starting point" if r["start"] else "parent"} if r else None) for r in (ro, rn)]
    vo, vn = (r["verdict"] if r else s["status"] for r, s in ((ro, old), (rn, new)))
    return {
        "schema": SCHEMA_ID, "autocompress": __version__,
        "old": _summary(old), "new": _summary(new),
        "verdict": {"old": vo, "new": vn, "changed": vo != vn},
        "target": {"old": to, "new": tn,
                   "changed": [f for f in TARGET_FIELDS if to and tn and to.get(f) != tn.get(f)]},
        "parent": {"old": par[0], "new": par[1], "changed": bool(par[0] and par[1] and par[0] != par[1])},
        "bounds": bounds,
        "binding": {"old": bo, "new": bn, "became_binding": [b for b in bn if b not in bo],
                    "no_longer_binding": [b for b in bo if b not in bn]},
        "start": {"old": _arch(ro), "new": _arch(rn)},
        "memory": {"old": mem[0], "new": mem[1]},
        "diagnosis": list(rn["diagnosis"]) if rn else [],
    }


def render_diff_json(d: dict) -> str:
    return json.dumps(d, indent=2, sort_keys=True) + "\n"


# ---- Markdown ------------------------------------------------------------------------------

_STATUS = {"absent": "absent", "invalid": "INVALID"}
_FIELD = {"hardware": "hardware", "engine": "engine", "weight_precision": "precision", "kv_precision": "KV precision",
          "tensor_parallel": "tensor parallel", "memory_limit_bytes": "memory limit"}
_CHANGE = {"tightened": "tighter", "loosened": "looser", "added": "new bound", "removed": "removed",
           "changed": "changed", "same": ""}


def _verdict(v: str) -> str:
    return VERDICT_TEXT.get(v, _STATUS.get(v, v))


def _pair(metric: str, a, b, bold_change: bool = True) -> str:
    fa, fb = fmt_value(metric, a), fmt_value(metric, b)
    if fa == fb:
        return fa
    return f"{fa} → **{fb}**" if bold_change else f"{fa} → {fb}"


def _pred(c: dict | None, key: str, metric: str) -> str:
    if c is None or c[key] is None:
        return "-"
    ok = c[f"{key}_ok"]
    return fmt_value(metric, c[key]) + ("" if ok else " ✗")


def _target_line(t: dict) -> str:
    lim = f", memory <= {fmt_value('memory', t['memory_limit_bytes'])}" if t["memory_limit_bytes"] else ""
    return (f"{t['hardware']}, {t['engine']}, {t['weight_precision']} weights, {t['kv_precision']} KV, "
            f"TP {t['tensor_parallel']}{lim}")


def render_diff_markdown(d: dict) -> str:
    o, n = d["old"], d["new"]
    v = d["verdict"]
    out = [f"## acc diff: `{o['label']}` → `{n['label']}`", "",
           f"**Verdict**: {_verdict(v['old'])} → **{_verdict(v['new'])}**" if v["changed"] else
           f"**Verdict**: {_verdict(v['new'])} (unchanged)", ""]
    for s, which in ((o, "old"), (n, "new")):
        if s["status"] == "absent":
            out.append(f"- The {which} spec does not exist (the change {'adds' if which == 'old' else 'deletes'} it).")
        if s["reason"]:
            out.append(f"- {which.capitalize()}: {s['reason']}")
    t = d["target"]
    if t["old"] and t["new"]:
        if t["changed"]:
            def fv(f, v):
                return "none" if v is None else fmt_value("memory", v) if f == "memory_limit_bytes" else str(v)
            moves = "; ".join(f"{_FIELD[f]} {fv(f, t['old'][f])} → **{fv(f, t['new'][f])}**" for f in t["changed"])
            out.append(f"- **Target**: {moves}")
        else:
            out.append(f"- **Target** (unchanged): {_target_line(t['new'])}")
    p = d["parent"]
    if p["old"] and p["new"]:
        out.append(f"- **Parent**: {p['old']['description']} → **{p['new']['description']}**" if p["changed"] else
                   f"- **Parent** (unchanged): {p['new']['name']}, {p['new']['params'] / 1e6:,.1f}M params")
    b = d["binding"]
    if b["became_binding"] or b["no_longer_binding"]:
        parts = ([f"became binding: {', '.join(f'`{x}`' for x in b['became_binding'])}"] if b["became_binding"] else []) + \
                ([f"no longer binding: {', '.join(f'`{x}`' for x in b['no_longer_binding'])}"]
                 if b["no_longer_binding"] else [])
        out.append(f"- **Binding bounds**: {'; '.join(parts)}")
    for s in (o, n):
        if s["errors"]:
            out += ["", f"<details><summary>{s['label']}: {len(s['errors'])} error(s)</summary>", "", "```"]
            out += s["errors"] + ["```", "", "</details>"]
    if d["bounds"]:
        out += ["", "### Bounds (predicted)", "", "| bound | contract | parent | starting point | binding | change |",
                "|---|---|---|---|---|---|"]
        for row in d["bounds"]:
            co, cn, m = row["old"], row["new"], row["metric"]
            contract = " → ".join(x for x in (f"{co['op']} {fmt_value(m, co['bound'])}" if co else "-",
                                              f"{cn['op']} {fmt_value(m, cn['bound'])}" if cn else "-"))
            if co and cn and row["change"] == "same":
                contract = f"{cn['op']} {fmt_value(m, cn['bound'])}"
            parent = " → ".join(dict.fromkeys([_pred(co, "parent", m), _pred(cn, "parent", m)]))
            start = " → ".join(dict.fromkeys([_pred(co, "start", m), _pred(cn, "start", m)]))
            binding = " → ".join(dict.fromkeys(["yes" if c and c["binding"] else "no" for c in (co, cn)]))
            out.append(f"| {row['name']} | {contract} | {parent} | {start} | {binding} | {_CHANGE[row['change']]} |")
        out += ["", "✗: the prediction misses the bound. A → B: old → new; one value: unchanged."]
    so, sn = d["start"]["old"], d["start"]["new"]
    if so or sn:
        def val(a, key, fmt):
            return "-" if a is None or a[key] is None else fmt(a[key])
        rows = [("hidden", "hidden", str), ("params", "params", lambda x: f"{x / 1e6:,.1f}M"),
                ("importance kept", "importance_kept", lambda x: f"{x:.3f}"),
                ("layers with a mixer", "mixers", str), ("layers with an FFN", "ffns", str),
                ("uniform baseline params", "uniform_params", lambda x: f"{x / 1e6:,.1f}M")]
        out += ["", "### Starting architecture", "", "| | old | new |", "|---|---|---|"]
        out += [f"| {label} | {val(so, k, f)} | {val(sn, k, f)} |" for label, k, f in rows]
        for a, which in ((so, "old"), (sn, "new")):
            if a:
                out += ["", f"<details><summary>{which}: per-layer runs</summary>", "", "| layers | mixer | FFN |",
                        "|---|---|---|"] + [f"| {s} | {m} | {f} |" for s, m, f in a["layers"]] + ["", "</details>"]
    mo, mn = d["memory"]["old"], d["memory"]["new"]
    if mo or mn:
        def mem(x):
            return "-" if x is None else f"{x['total'] / MiB:,.0f} of {x['limit'] / MiB:,.0f} MiB ({x['of']})"
        out += ["", f"**Memory needed**: {mem(mo)} → {mem(mn)}" if mem(mo) != mem(mn) else
                f"**Memory needed** (unchanged): {mem(mn)}"]
    if d["diagnosis"]:
        out += ["", "### What would make the new contract feasible", ""]
        for x in d["diagnosis"]:
            if x["best"] is None or x["basis"] == "engine":
                out.append(f"- `{x['bound']}`: {x['note']}")
            else:
                out.append(f"- `{x['bound']}` {x['op']} {fmt_value(x['metric'], x['value'])}: best reachable "
                           f"{fmt_value(x['metric'], x['best'])} ({x['note']})")
    out += ["", "All numbers are predictions of each spec's cost-model profile (`acc check`); no weights were loaded.",
            ""]
    return "\n".join(out)
