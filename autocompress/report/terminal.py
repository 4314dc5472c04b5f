"""Rich terminal summary of a feasibility report (reads the same dict as the Markdown renderer)."""

from __future__ import annotations

from autocompress.report.feasibility import MiB, fmt_value, layer_runs


def print_feasibility(console, report: dict) -> None:
    from rich.table import Table

    ok = report["verdict"] == "feasible"
    style = "bold green" if ok else "bold red"
    t, p, cm = report["target"], report["parent"], report["cost_model"]
    console.print(f"[bold]{report['spec']['path']}[/]: [{style}]{report['verdict'].upper()}[/]")
    console.print(f"parent  {p['description']}")
    lim = f", memory <= {fmt_value('memory', t['memory_limit_bytes'])}" if t["memory_limit_bytes"] else ""
    console.print(f"target  {t['hardware']} / {t['engine']} / {t['weight_precision']} (KV {t['kv_precision']}), "
                  f"TP {t['tensor_parallel']}{lim}")
    measured = "measured error known" if cm["known_error"] else "never measured on this target"
    console.print(f"[dim]all numbers predicted by profile {cm['profile']} ({cm['source']}, {measured})[/]")

    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col in ("bound", "contract", "parent", "start", "uniform", ""):
        table.add_column(col)
    start, uni = report.get("start"), report.get("uniform")

    def cell(rep, name):
        c = next((c for c in rep["checks"] if c["name"] == name), None) if rep else None
        if c is None:
            return "-"
        v = fmt_value(c["metric"], c["predicted"])
        return f"[green]{v}[/]" if c["ok"] else f"[red]{v} x{c['ratio']:.2f}[/]"
    for c in report["parent_costs"]["checks"]:
        table.add_row(c["name"], f"{c['op']} {fmt_value(c['metric'], c['bound'])}", cell(report["parent_costs"],
                      c["name"]), cell(start, c["name"]), cell(uni, c["name"]),
                      "[yellow]binding[/]" if c["name"] in report["binding"] else "")
    console.print(table)
    if start:
        a = start["architecture"]
        console.print(f"starting point: hidden {a['hidden']}, {a['params'] / 1e6:,.1f}M params "
                      f"(parent {p['architecture']['params'] / 1e6:,.1f}M), importance kept {a['importance_kept']:.3f}")
        for span, mix, ffn in layer_runs(a):
            console.print(f"  layers {span:>7}  {mix:<14} {ffn}")
        if not uni:
            console.print("[yellow]no uniform (Minitron-style) architecture meets this contract[/]")
    mem = (start or report["parent_costs"])["memory"]
    console.print(f"memory: {mem['total'] / MiB:,.0f} MiB needed of {mem['limit'] / MiB:,.0f} MiB "
                  f"(weights {mem['weights'] / MiB:,.0f}, activation {mem['peak_activation'] / MiB:,.0f}, "
                  f"KV {mem['kv_cache'] / MiB:,.0f} MiB)")
    if mem["message"]:
        console.print(f"[red]{mem['message']}[/]")
    for d in report["diagnosis"]:
        if d["best"] is None:
            console.print(f"[red]- {d['bound']}[/]: {d['note']}")
        else:
            basis = "the other bounds kept" if d["basis"] == "others kept" else "every other bound dropped"
            console.print(f"[red]- {d['bound']}[/] {d['op']} {fmt_value(d['metric'], d['value'])}: best reachable "
                          f"with {basis}: [bold]{fmt_value(d['metric'], d['best'])}[/] ({d['note']})")
