"""Continuous relaxation of the contract as a linear program (solved with cvxpy + HiGHS).

For one global hidden size d, the variables per layer l are
  a_l in [0,1] attention kept, k_l in [0, KV_l] KV heads (k_l >= a_l, k_l <= KV_l a_l),
  g_l in [0,1] FFN kept,       w_l in [0, I_l] FFN width (or routed experts for MoE layers),
  u_l >= max(a_l, g_l) the layer executes (per-layer engine overhead).
Every op's FLOPs and bytes are affine in these (``cost.roofline.block_op_table``), so an op's
roofline time max(F/peak, B/bw) is convex piecewise linear. Where one side dominates on the
whole box (checked at the box corners: the difference of two affine functions takes its extreme
values there) the op is linear; otherwise it gets an epigraph variable t >= both sides. Latency
metrics are weighted sums of engine steps (the same passes as ``cost.latency``; the decode sum of
a batch workload by a midpoint rule over KV lengths), memory is affine in weights and KV heads
with the rest of the engine's terms frozen at the parent's values (an upper bound: pruning only
shrinks activations). All constraints are normalized by their bound.

Objective: kept importance, phi_h(d/D) * sum_l (alpha_l A_l + beta_l F_l), with concave
piecewise-linear curves (``feasibility.importance``). A_l = (a_l + psi(k_l/KV_l)) / 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autocompress.catalog.engines import ENGINES, scheduler_defaults
from autocompress.cost import Numerics, Op, Pass, Segment, block_op_table, memory_breakdown, model_ops
from autocompress.cost.latency import _graph_ok, _prefill_passes, prefill_tokens
from autocompress.cost.roofline import roofline_seconds
from autocompress.feasibility._cvx import cvxpy
from autocompress.ir import MLP, Architecture, Attention, MoE

A, K, G, W = 0, 1, 2, 3  # variable kinds, laid out as x[kind * L + l]
DECODE_POINTS = 4  # midpoint rule over the KV lengths of a batch workload's decode steps


@dataclass
class Metric:
    """metric(x) = const + lin @ x + sum_j tw[j] * t_j + uw * sum(u)."""

    name: str
    const: float
    lin: np.ndarray
    tw: dict  # epigraph row index -> weight
    uw: float


class Relaxation:
    """The LP data for one hidden size; metrics are built once, solved for several objectives."""

    def __init__(self, parent: Architecture, d: int, spec, profile, device, space, importance):
        self.parent, self.d, self.spec, self.profile, self.device = parent, d, spec, profile, device
        self.space, self.importance = space, importance
        self.arch = parent.with_blocks(parent.blocks, hidden_size=d)
        self.L = parent.num_layers
        self.nb = Numerics.from_target(spec.target)
        self.rows_f: list[np.ndarray] = []  # epigraph rows: t_j >= P_j @ x and t_j >= Q_j @ x
        self.rows_g: list[np.ndarray] = []
        self._bounds()
        self.metrics: dict[str, Metric] = {}
        for w in spec.workloads:
            self._workload(w)
        self._memory()

    # ---- variables ---------------------------------------------------------------------
    def _bounds(self) -> None:
        L, sp = self.L, self.space
        lo, hi = np.zeros(4 * L), np.zeros(4 * L)
        self.at = np.zeros(4 * L)  # the parent's values
        for l, b in enumerate(self.parent.blocks):
            m, f = b.mixer, b.ffn
            if isinstance(m, Attention):
                self.at[A * L + l], self.at[K * L + l] = 1, m.kv_heads
                hi[A * L + l], hi[K * L + l] = 1, m.kv_heads
                can_drop = sp.allows("attention") or sp.allows("depth")
                if (l == 0 and sp.first_attention_fixed) or not can_drop:
                    lo[A * L + l] = 1
                if not sp.allows("kv_heads"):
                    lo[K * L + l] = m.kv_heads
            elif m is not None:  # Mamba mixers are not compressed in v1: frozen at the parent's
                self.at[A * L + l] = lo[A * L + l] = hi[A * L + l] = 1
            if isinstance(f, (MLP, MoE)):
                size = f.width if isinstance(f, MLP) else f.experts
                self.at[G * L + l], self.at[W * L + l] = 1, size
                hi[G * L + l], hi[W * L + l] = 1, size
                if not (sp.allows("ffn") or sp.allows("depth")):
                    lo[G * L + l] = 1
                axis = "ffn" if isinstance(f, MLP) else "experts"
                if not sp.allows(axis):
                    lo[W * L + l] = size
        self.lo, self.hi = lo, hi

    # ---- latency -------------------------------------------------------------------------
    def _scales(self, cls: str) -> tuple[float, float]:
        c, _ = roofline_seconds(Op("u", 1.0, 0.0, 0.0, cls), self.device, self.profile, self.nb.weight)
        _, m = roofline_seconds(Op("u", 0.0, 1.0, 0.0, cls), self.device, self.profile, self.nb.weight)
        return c, m

    def _step(self, p: Pass, graph: bool) -> tuple[float, np.ndarray, dict]:
        """(const, lin, epigraph rows) of one engine step's time, as affine functions of x."""
        L, k = self.L, self.profile.kernel
        launch = k.graph_launch_s if graph else k.launch_s
        const = k.step_overhead_s + sum(
            max(roofline_seconds(op, self.device, self.profile, self.nb.weight)) + op.launches * launch
            for op in model_ops(self.arch, p, self.nb))
        lin = np.zeros(4 * L)
        tws: dict = {}
        for l in range(L):
            table = block_op_table(self.arch, l, p, self.device, self.profile, self.nb)
            for row in table.rows:
                keep, var = (A, K) if row.part == "mixer" else (G, W)
                sl_f, sl_b = dict(row.dflops), dict(row.dbytes)
                vname = next((v for v in sl_f if v in ("kv_heads", "ffn_width", "experts")), None)
                f = np.zeros(4 * L)
                bvec = np.zeros(4 * L)
                df, db = (sl_f.get(vname, 0.0), sl_b.get(vname, 0.0)) if vname else (0.0, 0.0)
                at = self.at[var * L + l] if vname else 0.0
                if self.lo[keep * L + l] == self.hi[keep * L + l] == 1 and not vname:
                    const_f, const_b = row.op.flops, row.op.bytes  # frozen sub-block (Mamba)
                    cs, ms = self._scales(row.op.cls)
                    const += max(cs * const_f, ms * const_b) + row.op.launches * launch
                    continue
                f[keep * L + l], f[var * L + l] = row.op.flops - df * at, df
                bvec[keep * L + l], bvec[var * L + l] = row.op.bytes - db * at, db
                cs, ms = self._scales(row.op.cls)
                P, Q = cs * f, ms * bvec
                lin[keep * L + l] += row.op.launches * launch
                # dominance over the box corners of (keep, var): (0,0), (1,lo..hi)
                corners = [(1.0, self.lo[var * L + l] if vname else 0.0), (1.0, self.hi[var * L + l] if vname else 0.0)]
                diffs = [(P - Q)[keep * L + l] * c0 + (P - Q)[var * L + l] * c1 for c0, c1 in corners]
                if min(diffs) >= 0:
                    lin += P
                elif max(diffs) <= 0:
                    lin += Q
                else:
                    self.rows_f.append(P)
                    self.rows_g.append(Q)
                    tws[len(self.rows_f) - 1] = tws.get(len(self.rows_f) - 1, 0.0) + 1.0
        return const, lin, tws

    def _add(self, acc: list, step, weight: float) -> None:
        const, lin, tws = step
        acc[0] += weight * const
        acc[1] = acc[1] + weight * lin
        for j, v in tws.items():
            acc[2][j] = acc[2].get(j, 0.0) + weight * v

    def _workload(self, w) -> None:
        target, L = self.spec.target, self.L
        engine = target.engine
        limits = scheduler_defaults(engine, self.device, server=w.mode == "serve")
        c, n_in, n_out = w.concurrency, w.input_tokens, w.output_tokens
        q = prefill_tokens(w)
        ctx = n_in - q
        chunk = limits.max_num_batched_tokens if ENGINES[engine].chunked_prefill else math.inf
        graph = _graph_ok(engine, self.device, c, limits.max_num_seqs)
        k = self.profile.kernel
        ttft = [k.prefill_fixed_s, np.zeros(4 * L), {}]
        decode = [0.0, np.zeros(4 * L), {}]
        executed = {"ttft": 0.0, "decode": 0.0}
        if w.mode == "batch":
            for p, n in _prefill_passes(c, q, ctx, chunk, None):
                self._add(ttft, self._step(p, False), n)
                executed["ttft"] += n
            steps = n_out - 1
            if steps > 0:
                pts = min(DECODE_POINTS, steps)
                for j in range(pts):
                    kv = n_in + 1 + (j + 0.5) * steps / pts - 0.5
                    self._add(decode, self._step(Pass.decode(c, kv), graph), steps / pts)
                executed["decode"] = 0.0 if graph else steps
        else:
            mean_kv = n_in + n_out / 2.0
            others = Pass.decode(c - 1, mean_kv) if c > 1 else None
            for p, n in _prefill_passes(1, q, ctx, chunk - (c - 1), others):
                self._add(ttft, self._step(p, False), n)
                executed["ttft"] += n
            mean_pass = Pass.decode(c, mean_kv)
            if c > 1:
                share = (c - 1) / n_out
                mean_pass = mean_pass + Pass((Segment(share, q, ctx, share),))
            self._add(decode, self._step(mean_pass, graph), max(n_out - 1, 0))
            executed["decode"] = 0.0 if graph else max(n_out - 1, 0)
        oh = k.layer_overhead_s
        steps = max(n_out - 1, 1)
        mk = lambda name, parts, uw: Metric(name, parts[0], parts[1], parts[2], uw)  # noqa: E731
        self.metrics[f"{w.name}.ttft"] = mk("ttft", ttft, oh * executed["ttft"])
        e2e = [ttft[0] + decode[0], ttft[1] + decode[1], dict(ttft[2])]
        for j, v in decode[2].items():
            e2e[2][j] = e2e[2].get(j, 0.0) + v
        self.metrics[f"{w.name}.e2e"] = mk("e2e", e2e, oh * (executed["ttft"] + executed["decode"]))
        tpot = [decode[0] / steps, decode[1] / steps, {j: v / steps for j, v in decode[2].items()}]
        self.metrics[f"{w.name}.tpot"] = mk("tpot", tpot, oh * executed["decode"] / steps)

    # ---- memory ----------------------------------------------------------------------------
    def _memory(self) -> None:
        L, d, t = self.L, self.d, self.spec.target
        wb = self.nb.w
        mem = memory_breakdown(self.arch, t, self.spec.workloads, self.profile, self.device)
        mf = self.profile.memory.margin_fraction
        wlin = np.zeros(4 * L)  # weight bytes as a function of x
        for l, b in enumerate(self.parent.blocks):
            m, f = b.mixer, b.ffn
            if isinstance(m, Attention):
                wlin[A * L + l] = wb * 2 * d * m.q_heads * m.head_dim
                wlin[K * L + l] = wb * 2 * d * m.head_dim
            if isinstance(f, MLP):
                wlin[W * L + l] = wb * (3 if f.gated else 2) * d
            elif isinstance(f, MoE):
                wlin[W * L + l] = wb * f.expert_params(d)
        wlin /= t.tensor_parallel
        w_parent = float(wlin @ self.at)
        self.param_lin = wlin / wb * t.tensor_parallel  # kept block parameters (linear layers)
        kvs = []
        for w in self.spec.workloads:  # KV bytes per KV head of each layer, this workload's sequences
            tokens = w.input_tokens + w.output_tokens
            kv = np.zeros(4 * L)
            for l, b in enumerate(self.parent.blocks):
                if isinstance(b.mixer, Attention):
                    one = b.mixer.__class__(b.mixer.q_heads, 1, b.mixer.head_dim, b.mixer.sliding_window)
                    single = self.arch.with_blocks((b.__class__(one, None),))
                    from autocompress.cost import kv_cache_bytes
                    kv[K * L + l] = kv_cache_bytes(single, w.concurrency, tokens, self.nb.kvb, self.nb.a,
                                                   1, ENGINES[t.engine].kv_block_size)
            kvs.append((w.name, kv))
        kv_parent = max(float(kv @ self.at) for _, kv in kvs)
        const = mem.total_bytes - (1 + mf) * w_parent - max(kv_parent, mem.kv_reserved_bytes)
        floor = mem.kv_reserved_bytes if mem.cpu_kv_space_gib else 0.0  # vLLM CPU reserves whole GiB
        self.mem_const, self.mem_w, self.mem_kvs, self.mem_floor = const, (1 + mf) * wlin, kvs, floor
        self.mem_limit = float(t.memory_limit_bytes or mem.limit_bytes)
        if t.engine == "vllm" and self.device.kind == "gpu" and not t.memory_limit_bytes:
            self.mem_limit = float(mem.requested_bytes)

    # ---- problem assembly -------------------------------------------------------------------
    def build(self, objective: str = "importance", drop: frozenset = frozenset(), uniform: bool = False):
        """A cvxpy problem; ``objective`` is "importance" or the name of a bound to minimize."""
        cp = cvxpy()
        L = self.L
        x = cp.Variable(4 * L)
        u = cp.Variable(L)
        n_t = len(self.rows_f)
        t = cp.Variable(n_t) if n_t else None
        cons = [x >= self.lo, x <= self.hi, u >= x[A * L:(A + 1) * L], u >= x[G * L:(G + 1) * L], u <= 1]
        kv_min = min(self.space.kv_choices) if self.space.kv_choices else 0
        att = [l for l, b in enumerate(self.parent.blocks) if isinstance(b.mixer, Attention)]
        ffn = [l for l, b in enumerate(self.parent.blocks) if isinstance(b.ffn, (MLP, MoE))]
        if att:
            ia, ik = np.array(att) + A * L, np.array(att) + K * L
            cons += [x[ik] >= kv_min * x[ia], x[ik] <= self.hi[ik] * x[ia]]
        if ffn:
            ig, iw = np.array(ffn) + G * L, np.array(ffn) + W * L
            step = self.space.ffn_step if any(isinstance(self.parent.blocks[l].ffn, MLP) for l in ffn) else 1
            cons += [x[iw] >= np.minimum(step, self.hi[iw]) * x[ig], x[iw] <= self.hi[iw] * x[ig]]
        if n_t:
            P, Q = np.array(self.rows_f), np.array(self.rows_g)
            cons += [t >= P @ x, t >= Q @ x]
        if uniform:
            for kind, idx in ((A, att), (K, att), (G, ffn), (W, ffn)):
                for l in idx[1:]:
                    if self.hi[kind * L + l] == self.hi[kind * L + idx[0]]:
                        cons.append(x[kind * L + l] == x[kind * L + idx[0]])
        parent_params = float(self.param_lin @ self.at) * (self.parent.hidden_size / self.d)
        cons.append(self.param_lin @ x >= self.space.min_keep * parent_params)
        exprs = {}
        for w in self.spec.workloads:
            for b in w.bounds:
                name = f"{w.name}.{b.metric}"
                if b.metric == "throughput":  # c*out/E2E >= X  <=>  E2E <= c*out/X
                    expr, limit = self._expr(f"{w.name}.e2e", x, u, t), w.concurrency * w.output_tokens / b.value
                else:
                    expr, limit = self._expr(name, x, u, t), b.value
                exprs[name] = (expr, limit)
        for i, (wname, kv) in enumerate(self.mem_kvs):
            e = self.mem_const + self.mem_w @ x + cp.maximum(kv @ x, self.mem_floor)
            exprs["memory" if i == 0 else f"memory.{wname}"] = (e, self.mem_limit)
        named = {}
        for name, (expr, limit) in exprs.items():
            if name.split(".")[0] == "memory" and "memory" in drop:
                continue
            if name in drop:
                continue
            named[name] = expr / limit <= 1
        cons += list(named.values())
        if objective == "importance":
            obj = cp.Maximize(self.importance.expression(cp, x, L, self.parent, self.at, self.hi))
        else:
            keys = [k for k in exprs if k == objective or (objective == "memory" and k.startswith("memory"))]
            if len(keys) == 1:
                obj = cp.Minimize(exprs[keys[0]][0] / exprs[keys[0]][1])
            else:
                s = cp.Variable()
                cons += [exprs[k][0] / exprs[k][1] <= s for k in keys]
                obj = cp.Minimize(s)
        return cp.Problem(obj, cons), x, named, exprs

    def _expr(self, name, x, u, t):
        m = self.metrics[name]
        e = m.const + m.lin @ x + m.uw * sum_(u)
        if m.tw and t is not None:
            idx = np.array(sorted(m.tw))
            e = e + np.array([m.tw[j] for j in idx]) @ t[idx]
        return e


def sum_(v):
    return v @ np.ones(v.shape[0])


@dataclass(frozen=True)
class LPResult:
    d: int
    status: str
    value: float
    x: np.ndarray | None
    binding: tuple[str, ...]
    metric_values: tuple[tuple[str, float], ...]  # relaxed metric values at the solution (SI units)


def solve(relax: Relaxation, objective: str = "importance", drop: frozenset = frozenset(),
          uniform: bool = False) -> LPResult:
    prob, x, named, exprs = relax.build(objective, drop, uniform)
    try:
        prob.solve(solver="HIGHS")
    except Exception:  # noqa: BLE001 - a solver failure is reported as infeasible, never a crash
        prob.solve(solver="CLARABEL")
    status = prob.status
    if status not in ("optimal", "optimal_inaccurate"):
        return LPResult(relax.d, status, math.nan, None, (), ())
    binding = tuple(sorted(n for n, c in named.items() if c.dual_value is not None and abs(float(c.dual_value)) > 1e-7))
    values = tuple((n, float(e.value) if hasattr(e, "value") else float(e)) for n, (e, _) in exprs.items())
    return LPResult(relax.d, status, float(prob.value), np.array(x.value), binding, values)
