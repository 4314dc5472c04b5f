"""Terminal views of the ``acc`` command, with rich: the feasibility summary (the same dict as the
Markdown renderer reads), progress bars for long stages (``autocompress.progress`` events), the
stage-time summary of a build, and where a report goes (``emit``: a file or stdout)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bars
from rich.table import Table

from autocompress.cache import atomic_write_text
from autocompress.progress import LineSink, Progress, TaskState, describe, duration, rate_text
from autocompress.report.feasibility import VERDICT_TEXT, MiB, fmt_value, layer_runs


def console(stderr: bool = False) -> Console:
    """A console for plain reports: no highlighting of numbers, long lines kept whole."""
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def emit(text: str, out: str | None, note: str = "") -> None:
    """A report to ``out`` (atomically, and said on stderr: stdout stays empty), or to stdout."""
    if out:
        atomic_write_text(out, text)
        sys.stderr.write(f"wrote {out}{note}\n")
    else:
        sys.stdout.write(text)


def print_feasibility(console, report: dict) -> None:
    ok = report["verdict"] == "feasible"
    style = "bold green" if ok else "bold red"
    t, p, cm = report["target"], report["parent"], report["cost_model"]
    console.print(f"[bold]{report['spec']['path']}[/]: [{style}]{VERDICT_TEXT[report['verdict']]}[/]")
    if report.get("reason"):
        console.print(f"[{style}]{report['reason']}[/]")
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
    imp = report["importance"]
    if imp != "prior":
        console.print(f"[dim]objective: measured importance from {imp['file']} (sha256 {imp['sha256'][:12]}...)[/]")
    for d in report["diagnosis"]:
        if d["basis"] == "engine":
            console.print(f"[red]- {d['bound']}[/] {d['op']} {fmt_value(d['metric'], d['value'])}: {d['note']}")
        elif d["best"] is None:
            console.print(f"[red]- {d['bound']}[/]: {d['note']}")
        else:
            basis = "the other bounds kept" if d["basis"] == "others kept" else "every other bound dropped"
            console.print(f"[red]- {d['bound']}[/] {d['op']} {fmt_value(d['metric'], d['value'])}: best reachable "
                          f"with {basis}: [bold]{fmt_value(d['metric'], d['best'])}[/] ({d['note']})")


# ---- progress -------------------------------------------------------------------------------------

class RichSink:
    """Progress bars (rate, ETA, the task's fields) on a terminal; log lines above them."""

    def __init__(self, console):
        self.console = console
        self.bars = Bars(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[rate]}"), TextColumn("ETA {task.fields[eta]}"),
                             TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=console, transient=True)
        self.ids: dict[int, int] = {}
        self.bars.start()

    def _fields(self, t: TaskState) -> dict:
        return {"rate": rate_text(t), "eta": duration(t.eta_s), "info": "  ".join(f"{k} {v}" for k, v in t.fields.items())}

    def start(self, t: TaskState) -> None:
        self.ids[id(t)] = self.bars.add_task(t.name, total=t.total, completed=t.done, **self._fields(t))

    def update(self, t: TaskState) -> None:
        self.bars.update(self.ids[id(t)], total=t.total, completed=t.done, **self._fields(t))

    def finish(self, t: TaskState) -> None:
        self.bars.remove_task(self.ids.pop(id(t)))
        self.console.print(describe(t), markup=False, highlight=False)

    def log(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False)

    def close(self) -> None:
        self.bars.stop()


class _Lines(LineSink):
    def close(self) -> None:
        pass


def build_progress(console, quiet: bool) -> Progress:
    """Bars on an interactive terminal; plain lines with rate and ETA otherwise or with ``--quiet``."""
    if not quiet and console.is_terminal and sys.stderr.isatty():
        return Progress(RichSink(console))
    return Progress(_Lines(lambda m: console.print(m, markup=False, highlight=False)))


def print_stage_times(console, timings: dict, total: float) -> None:
    width = max((len(k) for k in timings), default=5)
    console.print("stage times:", highlight=False)
    for name, seconds in timings.items():
        console.print(f"  {name:<{width}}  {duration(seconds):>7}", markup=False, highlight=False)
    console.print(f"  {'total':<{width}}  {duration(total):>7}", markup=False, highlight=False)
