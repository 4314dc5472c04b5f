"""The checked deployment contract: typed, frozen, every value in SI units with its source span.

``autocompress.lang.api.parse_spec`` produces a ``Spec`` after syntax, schema and semantic checks;
later stages trust it. Spans never take part in equality, so ``parse(fmt(x)) == parse(x)``
compares meaning, not layout. Optional sections are ``None`` when absent: their defaults are
derived (and shown) by ``autocompress.plan.derive``, not invented here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autocompress.diagnostics import NO_SPAN, Span

_span = lambda: field(default=NO_SPAN, compare=False, repr=False)  # noqa: E731

METRICS = ("ttft", "tpot", "e2e", "throughput")  # latency metrics in seconds, throughput in tok/s
PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
ENGINES = ("vllm", "transformers")
AXES = ("hidden", "kv_heads", "ffn", "depth", "attention", "experts", "mamba")
STRATEGIES = ("autocompress", "router", "router-refine", "uniform")


@dataclass(frozen=True)
class ParentRef:
    kind: str  # "alias" | "hf_dir" | "gguf" | "config" (a bare config.json: feasibility only)
    value: str  # alias name or path as written (paths resolved relative to the spec file)
    span: Span = _span()


@dataclass(frozen=True)
class CustomDevice:
    """An inline device description for hardware not in the catalog."""

    name: str
    memory_bytes: int
    bandwidth_bytes_s: float
    flops: float  # dense 16-bit FLOP/s
    fp8_flops: float | None = None
    fp32_flops: float | None = None
    span: Span = _span()


@dataclass(frozen=True)
class Target:
    hardware: str | CustomDevice  # a catalog name, or an inline device
    engine: str
    weight_precision: str
    kv_precision: str
    tensor_parallel: int = 1
    memory_limit_bytes: int | None = None  # "memory <= 512 MiB": what the model may use in total
    profile: str | None = None  # path of a calibration profile file, or None for the built-in one
    span: Span = _span()
    hardware_span: Span = _span()
    memory_span: Span = _span()


@dataclass(frozen=True)
class Bound:
    metric: str  # one of METRICS
    op: str  # "<=" for latencies, ">=" for throughput
    value: float  # seconds for latencies, tokens/s for throughput
    percentile: float | None = None  # p50/p90/p99 where the metric is a distribution (None: mean)
    span: Span = _span()


@dataclass(frozen=True)
class Workload:
    name: str
    concurrency: int  # sequences in flight; for "batch N" this is N
    mode: str  # "serve" (concurrency: streaming requests) | "batch" (offline generate of N prompts)
    input_tokens: int
    output_tokens: int
    prefix_cache: float = 0.0  # share of input tokens served from the prefix cache, 0..1
    bounds: tuple[Bound, ...] = ()
    span: Span = _span()


@dataclass(frozen=True)
class Search:
    strategy: str | None = None  # one of STRATEGIES
    axes: tuple[str, ...] | None = None
    steps: int | None = None
    seed: int | None = None
    temperature: float | None = None
    tokens: int | None = None  # router v2's search budget in tokens (or ``steps``, not both)
    finalists: int | None = None  # candidates distilled briefly for the final choice (1: none)
    span: Span = _span()


@dataclass(frozen=True)
class Distill:
    data: tuple[str, ...] | None = None  # files / globs; None: the built-in mixture
    steps: int | None = None
    tokens: int | None = None  # distillation budget in tokens
    seq_len: int | None = None
    batch: int | None = None
    lr: float | None = None
    span: Span = _span()


@dataclass(frozen=True)
class Evaluate:
    data: tuple[str, ...] | None = None
    tokens: int | None = None
    span: Span = _span()


@dataclass(frozen=True)
class Spec:
    parent: ParentRef
    target: Target
    workloads: tuple[Workload, ...]
    search: Search | None = None
    distill: Distill | None = None
    evaluate: Evaluate | None = None
    output: str | None = None
    path: str = field(default="<spec>", compare=False)  # the file it came from, for messages
    output_span: Span = _span()

    def workload(self, name: str) -> Workload:
        return next(w for w in self.workloads if w.name == name)


def default_kv(weights: str) -> str:
    """KV-cache precision when none is given: the weights' precision, except fp8 weights keep a
    bf16 cache (an fp8 KV cache changes attention numerics; it must be asked for explicitly)."""
    return "bf16" if weights == "fp8" else weights


def spec_from_projection(p, path: str) -> "Spec":
    """The typed Spec of a projection (``lower.Projection``) that passed every check; it trusts
    what it is given."""
    d, sp = p.data, p.spans
    t = d["target"]
    hw = t["hardware"]
    if isinstance(hw, dict):
        hw = CustomDevice(hw["name"], int(hw["memory_bytes"]), float(hw["bandwidth_bytes_s"]), float(hw["flops"]),
                          _opt(hw.get("fp8_flops"), float), _opt(hw.get("fp32_flops"), float),
                          span=sp[("target", "hardware")])
    mem = t.get("memory")
    target = Target(hardware=hw, engine=t["engine"], weight_precision=t["precision"],
                    kv_precision=t.get("kv_cache") or default_kv(t["precision"]),
                    tensor_parallel=int(t.get("tensor_parallel", 1)),
                    memory_limit_bytes=int(mem["bytes"]) if mem else None, profile=t.get("profile"),
                    span=sp[("target",)], hardware_span=sp.get(("target", "hardware"), sp[("target",)]),
                    memory_span=sp.get(("target", "memory", "bytes"), sp[("target",)]))
    workloads = []
    for i, w in enumerate(d["workloads"]):
        bounds = tuple(Bound(b["metric"], b["op"], float(b["value"]), b["percentile"],
                             span=sp[("workloads", i, "bounds", j)]) for j, b in enumerate(w["bounds"]))
        mode = "batch" if "batch" in w else "serve"
        workloads.append(Workload(w["name"], int(w[mode if mode == "batch" else "concurrency"]), mode,
                                  int(w["input_tokens"]), int(w["output_tokens"]), float(w.get("prefix_cache", 0.0)),
                                  bounds, span=sp[("workloads", i)]))
    s = d.get("search")
    search = None if s is None else Search(s.get("strategy"), _opt(s.get("axes"), tuple), _opt(s.get("steps"), int),
                                           _opt(s.get("seed"), int), _opt(s.get("temperature"), float),
                                           _opt(s.get("tokens"), int), _opt(s.get("finalists"), int),
                                           span=sp[("search",)])
    ds = d.get("distill")
    distill = None if ds is None else Distill(_opt(ds.get("data"), tuple), _opt(ds.get("steps"), int),
                                              _opt(ds.get("tokens"), int), _opt(ds.get("seq_len"), int),
                                              _opt(ds.get("batch"), int), _opt(ds.get("lr"), float),
                                              span=sp[("distill",)])
    e = d.get("evaluate")
    evaluate = None if e is None else Evaluate(_opt(e.get("data"), tuple), _opt(e.get("tokens"), int),
                                               span=sp[("evaluate",)])
    m = d["model"]
    return Spec(ParentRef(m["kind"], m["value"], span=sp[("model",)]), target, tuple(workloads), search, distill,
                evaluate, d.get("output"), path=path, output_span=sp.get(("output",), NO_SPAN))


def _opt(v, f):
    return None if v is None else f(v)
