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
import warnings
from dataclasses import dataclass

import numpy as np

from autocompress.catalog.engines import ENGINES, kv_block_size
from autocompress.cost import Numerics, Op, Pass, block_op_table, memory_breakdown, model_ops, workload_plan
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

    def __init__(self, parent: Architecture, d: int, spec, profile, device, space, importance, limits=None):
        self.parent, self.d, self.spec, self.profile, self.device = parent, d, spec, profile, device
        self.limits = limits
        self.space, self.importance = space, importance
        self.arch = parent.with_blocks(parent.blocks, hidden_size=d)
        self.L = parent.num_layers
        self.nb = Numerics.from_target(spec.target)
        self.ep: list[tuple] = []  # epigraph rows (keep idx, var idx, P_keep, P_var, Q_keep, Q_var)
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

    def _step(self, p: Pass, graph: bool | str) -> tuple[float, np.ndarray, dict, float]:
        """(const, lin, epigraph rows, per-layer overhead) of one engine step, affine in x.

        Mirrors ``cost.latency.step_cost``: ``graph`` False (eager), True (full CUDA graph) or
        "piecewise" (graph launches except the attention core; per-layer overhead stays).
        Identical blocks share one op table and are placed for all their layers at once.
        """
        L, k = self.L, self.profile.kernel

        def launch_of(cls: str) -> float:
            return k.graph_launch_s if graph is True or (graph == "piecewise" and cls != "attention") else k.launch_s
        const = k.step_overhead_s + sum(
            max(roofline_seconds(op, self.device, self.profile, self.nb.weight)) + op.launches * launch_of(op.cls)
            for op in model_ops(self.arch, p, self.nb))
        lin = np.zeros(4 * L)
        tws: dict = {}
        groups: dict = {}
        for l, blk in enumerate(self.arch.blocks):
            groups.setdefault(blk, []).append(l)
        for blk, layers in groups.items():
            S = np.array(layers)
            table = block_op_table(self.arch, layers[0], p, self.device, self.profile, self.nb)
            for row in table.rows:
                keep, var = (A, K) if row.part == "mixer" else (G, W)
                sl_f, sl_b = dict(row.dflops), dict(row.dbytes)
                vname = next((v for v in sl_f if v in ("kv_heads", "ffn_width", "experts")), None)
                cs, ms = self._scales(row.op.cls)
                launch = row.op.launches * launch_of(row.op.cls)
                if not vname and (self.lo[keep * L + S] == 1).all():  # frozen sub-block (Mamba mixer)
                    const += len(S) * (max(cs * row.op.flops, ms * row.op.bytes) + launch)
                    continue
                df, db = (sl_f.get(vname, 0.0), sl_b.get(vname, 0.0)) if vname else (0.0, 0.0)
                at = self.at[var * L + S] if vname else np.zeros(len(S))
                pk, pv = cs * (row.op.flops - df * at), np.full(len(S), cs * df)  # compute side, per layer
                qk, qv = ms * (row.op.bytes - db * at), np.full(len(S), ms * db)  # memory side
                lin[keep * L + S] += launch
                # dominance over the box corners (keep = 1, var = lo or hi): the sign of an affine
                # difference over a box is decided at its corners
                lo_v = self.lo[var * L + S] if vname else 0.0
                hi_v = self.hi[var * L + S] if vname else 0.0
                d_lo, d_hi = (pk - qk) + (pv - qv) * lo_v, (pk - qk) + (pv - qv) * hi_v
                comp = (d_lo >= 0) & (d_hi >= 0)
                mem = (d_lo <= 0) & (d_hi <= 0) & ~comp
                mixed = ~(comp | mem)
                np.add.at(lin, keep * L + S, np.where(comp, pk, np.where(mem, qk, 0.0)))
                if vname:
                    np.add.at(lin, var * L + S, np.where(comp, pv, np.where(mem, qv, 0.0)))
                for i in np.nonzero(mixed)[0]:
                    j = len(self.ep)
                    self.ep.append((keep * L + S[i], var * L + S[i], pk[i], pv[i] if vname else 0.0,
                                    qk[i], qv[i] if vname else 0.0))
                    tws[j] = tws.get(j, 0.0) + 1.0
        return const, lin, tws, (0.0 if graph is True else k.layer_overhead_s)

    @property
    def nt(self) -> int:
        return len(self.ep)

    def epigraph_matrices(self):
        """Sparse P, Q (nt x 4L): row j of the epigraph is t_j >= P_j x and t_j >= Q_j x."""
        from scipy import sparse

        nt, n = len(self.ep), 4 * self.L
        if not nt:
            return sparse.csr_matrix((0, n)), sparse.csr_matrix((0, n))
        e = np.array(self.ep)
        rows = np.repeat(np.arange(nt), 2)
        cols = e[:, :2].astype(int).ravel()
        P = sparse.csr_matrix((e[:, 2:4].ravel(), (rows, cols)), shape=(nt, n))
        Q = sparse.csr_matrix((e[:, 4:6].ravel(), (rows, cols)), shape=(nt, n))
        return P, Q

    def _add(self, acc: list, step, weight: float) -> None:
        """acc = [const, lin, epigraph weights, layer-overhead weight] += weight * step."""
        const, lin, tws, oh = step
        acc[0] += weight * const
        acc[1] = acc[1] + weight * lin
        for j, v in tws.items():
            acc[2][j] = acc[2].get(j, 0.0) + weight * v
        acc[3] += weight * oh

    def _workload(self, w) -> None:
        """TTFT, TPOT and E2E of one workload from the cost model's own plan of engine steps."""
        L = self.L
        plan = workload_plan(self.spec.target, w, self.device, self.profile, self.limits)
        ttft = [plan.fixed_s, np.zeros(4 * L), {}, 0.0]
        decode = [0.0, np.zeros(4 * L), {}, 0.0]
        for p, n, g in plan.prefill:
            self._add(ttft, self._step(p, g), n)
        steps = plan.decode_steps
        if steps > 0 and plan.mode == "batch":  # midpoint rule over the KV lengths
            pts = min(DECODE_POINTS, steps)
            for j in range(pts):
                kv = plan.kv_lo + (j + 0.5) * steps / pts - 0.5
                self._add(decode, self._step(Pass.decode(plan.decode_seqs, kv), plan.decode_graph), steps / pts)
        elif steps > 0:
            self._add(decode, self._step(plan.mean_pass, plan.decode_graph), steps)
        waves = plan.waves
        e2e = [waves * (ttft[0] + decode[0]), waves * (ttft[1] + decode[1]), {}, waves * (ttft[3] + decode[3])]
        for part in (ttft[2], decode[2]):
            for j, v in part.items():
                e2e[2][j] = e2e[2].get(j, 0.0) + waves * v
        div = max(steps, 1)
        tpot = [decode[0] / div, decode[1] / div, {j: v / div for j, v in decode[2].items()}, decode[3] / div]
        for name, parts in (("ttft", ttft), ("e2e", e2e), ("tpot", tpot)):
            self.metrics[f"{w.name}.{name}"] = Metric(name, parts[0], parts[1], parts[2], parts[3])

    # ---- memory ----------------------------------------------------------------------------
    def _memory(self) -> None:
        L, d, t = self.L, self.d, self.spec.target
        wb = self.nb.w
        mem = memory_breakdown(self.arch, t, self.spec.workloads, self.profile, self.device, self.limits)
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
                                                   1, kv_block_size(t.engine, self.device))
            kvs.append((w.name, kv))
        kv_parent = max(float(kv @ self.at) for _, kv in kvs)
        const = mem.total_bytes - (1 + mf) * w_parent - max(kv_parent, mem.kv_reserved_bytes)
        floor = mem.kv_reserved_bytes if mem.cpu_kv_space_gib else 0.0  # vLLM CPU reserves whole GiB
        self.mem_const, self.mem_w, self.mem_kvs, self.mem_floor = const, (1 + mf) * wlin, kvs, floor
        self.mem_limit = float(t.memory_limit_bytes or mem.limit_bytes)
        if t.engine == "vllm" and self.device.kind == "gpu" and not t.memory_limit_bytes:
            self.mem_limit = float(mem.requested_bytes)

    # ---- problem assembly -------------------------------------------------------------------
    def bound_rows(self) -> dict[str, tuple[float, np.ndarray, float]]:
        """name -> (const, row over x/u/t, limit) for each bound of the contract (memory apart)."""
        L, nt = self.L, self.nt
        out = {}
        for w in self.spec.workloads:
            for b in w.bounds:
                key = f"{w.name}.e2e" if b.metric == "throughput" else f"{w.name}.{b.metric}"
                m = self.metrics[key]
                row = np.zeros(5 * L + nt)
                row[:4 * L] = m.lin
                row[4 * L:5 * L] = m.uw
                for j, v in m.tw.items():
                    row[5 * L + j] += v
                limit = w.concurrency * w.output_tokens / b.value if b.metric == "throughput" else b.value
                out[f"{w.name}.{b.metric}"] = (m.const, row, limit)
        return out

    def _assemble(self) -> None:
        """The LP's fixed data: maximize c @ z s.t. Gm z <= h, lo <= z <= hi (Gm sparse).

        Layout of z: x (4L) | u (L) | t (epigraph rows) | s, r (L each: KV / FFN curve hypographs)
        | one KV epigraph per workload (memory, in units of the limit) | one objective epigraph o.
        Bound rows and objective rows are switched on and off through their right-hand sides, so
        one compiled cvxpy problem (DPP: parameters for c, h, lo, hi) serves every solve at this
        hidden size: the importance LP, pinned structures, and each bound's diagnosis.
        """
        from scipy import sparse  # loaded with cvxpy

        L, nt, nw = self.L, self.nt, len(self.mem_kvs)
        ou, ot = 4 * L, 5 * L
        os_, or_ = ot + nt, ot + nt + L
        om = or_ + L
        oo = om + nw
        n = oo + 1
        lo, hi = np.full(n, -BIG), np.full(n, BIG)
        lo[:4 * L], hi[:4 * L] = self.lo, self.hi
        lo[ou:ou + L], hi[ou:ou + L] = 0.0, 1.0
        ri: list[int] = []  # sparse triplets of Gm
        ci: list[int] = []
        vi: list[float] = []
        h: list[float] = []

        def le(entries, b: float) -> int:
            """Add the row sum(v * z[c] for c, v in entries) <= b; return its index."""
            i = len(h)
            for c, v in entries:
                if v:
                    ri.append(i)
                    ci.append(c)
                    vi.append(float(v))
            h.append(b)
            return i

        def dense(vec: np.ndarray, offset: int = 0):
            nz = np.nonzero(vec)[0]
            return [(offset + int(j), vec[j]) for j in nz]

        for l in range(L):  # u >= a, u >= g
            for kind in (A, G):
                le([(kind * L + l, 1.0), (ou + l, -1.0)], 0.0)
        kv_min = min(self.space.kv_choices) if self.space.kv_choices else 0
        att = [l for l, b in enumerate(self.parent.blocks) if isinstance(b.mixer, Attention)]
        ffn = [l for l, b in enumerate(self.parent.blocks) if isinstance(b.ffn, (MLP, MoE))]
        for l in att:  # kv_min * a <= k <= KV * a
            le([(A * L + l, kv_min), (K * L + l, -1.0)], 0.0)
            le([(K * L + l, 1.0), (A * L + l, -self.hi[K * L + l])], 0.0)
        for l in ffn:  # step * g <= w <= I * g
            f = self.parent.blocks[l].ffn
            step = min(self.space.ffn_step, self.hi[W * L + l]) if isinstance(f, MLP) else f.top_k
            le([(G * L + l, step), (W * L + l, -1.0)], 0.0)
            le([(W * L + l, 1.0), (G * L + l, -self.hi[W * L + l])], 0.0)
        for j, (ik, iv, pk, pv, qk, qv) in enumerate(self.ep):  # t >= P x, t >= Q x
            le([(ik, pk), (iv, pv), (ot + j, -1.0)], 0.0)
            le([(ik, qk), (iv, qv), (ot + j, -1.0)], 0.0)
        imp = self.importance
        for l in range(L):  # hypographs of the concave curves
            for off, var, curves, present in ((os_, K, imp.kv_curves, l in att), (or_, W, imp.ffn_curves, l in ffn)):
                if not present:
                    lo[off + l] = hi[off + l] = 0.0
                    continue
                curve = curves[l]
                xs = np.linspace(0.0, 1.0, len(curve))
                for i in range(len(curve) - 1):
                    slope = (curve[i + 1] - curve[i]) / (xs[i + 1] - xs[i])
                    le([(off + l, 1.0), (var * L + l, -slope / self.at[var * L + l])], curve[i] - slope * xs[i])
        parent_params = float(self.param_lin @ self.at) * (self.parent.hidden_size / self.d)
        le(dense(-self.param_lin / parent_params), -self.space.min_keep)
        # memory, per workload (units of the limit): const + W(x) + max(kv_w(x), floor) <= limit
        bounds: dict[str, tuple[float, list]] = {}  # name -> (normalized const, normalized row entries)
        for i, (wname, kv) in enumerate(self.mem_kvs):
            le(dense(kv / self.mem_limit) + [(om + i, -1.0)], 0.0)
            lo[om + i] = self.mem_floor / self.mem_limit
            bounds["memory" if i == 0 else f"memory.{wname}"] = (
                self.mem_const / self.mem_limit, dense(self.mem_w / self.mem_limit) + [(om + i, 1.0)])
        for name, (const, r5, limit) in self.bound_rows().items():
            bounds[name] = (const / limit, dense(r5 / limit))
        self.bound_index: dict[str, int] = {}
        self.obj_index: dict[str, int] = {}
        for name, (const, entries) in bounds.items():  # bound <= 1
            self.bound_index[name] = le(entries, 1.0 - const)
        for name, (const, entries) in bounds.items():  # objective epigraph: bound value <= o (off: rhs BIG)
            self.obj_index[name] = le(entries + [(oo, -1.0)], -const)
        self.bound_const = {name: const for name, (const, _) in bounds.items()}
        c = np.zeros(n)
        alpha, beta = np.array(imp.alpha), np.array(imp.beta)
        c[A * L:(A + 1) * L] = 0.5 * alpha
        c[os_:os_ + L] = 0.5 * alpha
        c[or_:or_ + L] = beta
        self.c_importance = c
        self.c_minimize = np.zeros(n)
        self.c_minimize[oo] = -1.0
        self.Gm = sparse.csr_matrix((vi, (ri, ci)), shape=(len(h), n))
        self.h, self.zlo, self.zhi, self.n = np.array(h), lo, hi, n

    def problem(self):
        """The compiled cvxpy problem at this hidden size (built once, DPP-parameterized)."""
        if getattr(self, "_problem", None) is None:
            cp = cvxpy()
            self._assemble()
            z = cp.Variable(self.n)
            c, h = cp.Parameter(self.n), cp.Parameter(len(self.h))
            lo, hi = cp.Parameter(self.n), cp.Parameter(self.n)
            ineq = self.Gm @ z <= h
            prob = cp.Problem(cp.Maximize(c @ z), [ineq, z >= lo, z <= hi])
            self._problem = (prob, z, c, h, lo, hi, ineq)
        return self._problem




@dataclass(frozen=True)
class LPResult:
    d: int
    status: str
    value: float
    x: np.ndarray | None
    binding: tuple[str, ...]


BIG = 1e9  # an "infinite" bound: far above any normalized value, small enough for HiGHS


def solve(relax: Relaxation, objective: str = "importance", drop: frozenset = frozenset(),
          fix: dict | None = None) -> LPResult:
    """Solve the LP at one hidden size with cvxpy + HiGHS (Clarabel as fallback).

    ``objective``: "importance" (maximize kept importance) or a bound's name (minimize its
    normalized value; "memory" covers every workload's memory row). ``drop``: bounds left out.
    ``fix``: variables pinned to a value (index into x -> value).
    """
    prob, z, c, h, lo, hi, ineq = relax.problem()
    hv = relax.h.copy()
    for name, i in relax.bound_index.items():
        if name in drop or (name.startswith("memory") and "memory" in drop):
            hv[i] = BIG
    for name, i in relax.obj_index.items():
        on = objective != "importance" and (name == objective or (objective == "memory" and name.startswith("memory")))
        hv[i] = -relax.bound_const[name] if on else BIG
    lov, hiv = relax.zlo.copy(), relax.zhi.copy()
    for i, v in (fix or {}).items():
        lov[i] = hiv[i] = v
    c.value = relax.c_importance if objective == "importance" else relax.c_minimize
    h.value, lo.value, hi.value = hv, lov, hiv
    status = None
    for solver in ("HIGHS", "CLARABEL"):  # HiGHS first; the interior-point solver as fallback
        try:
            with warnings.catch_warnings():  # "optimal_inaccurate" is judged below, not printed
                warnings.simplefilter("ignore")
                prob.solve(solver=solver)
            status = prob.status
        except Exception:  # noqa: BLE001 - a solver failure is "no answer", never a crash
            status = "solver_error"
        if status in ("optimal", "optimal_inaccurate", "infeasible"):
            break
    if status not in ("optimal", "optimal_inaccurate"):
        return LPResult(relax.d, status, math.nan, None, ())
    if prob.status not in ("optimal", "optimal_inaccurate"):
        return LPResult(relax.d, prob.status, math.nan, None, ())
    duals = ineq.dual_value
    binding = tuple(sorted(nm for nm, i in relax.bound_index.items()
                           if nm not in drop and duals is not None and abs(duals[i]) > 1e-7))
    value = float(prob.value) if objective == "importance" else -float(prob.value)
    return LPResult(relax.d, prob.status, value, np.array(z.value[:4 * relax.L]), binding)


def fix_structure(relax: Relaxation, x: np.ndarray) -> dict:
    """Pin the keep variables of an LP point to 0/1 (>= 0.5 kept), with KV heads / widths pinned to
    0 where removed (``drop_least_kept`` sheds more)."""
    L, fix = relax.L, {}
    for kind, var in ((A, K), (G, W)):
        for l in range(L):
            if relax.lo[kind * L + l] < relax.hi[kind * L + l]:
                on = 1.0 if x[kind * L + l] >= 0.5 else 0.0
                fix[kind * L + l] = on
                if not on:
                    fix[var * L + l] = 0.0
    return fix


def fix_layers(relax: Relaxation, dropped: set[int]) -> dict:
    """Pin a whole-layer structure: ``dropped`` layers removed, every other sub-block kept."""
    L, fix = relax.L, {}
    for l in range(L):
        for kind, var in ((A, K), (G, W)):
            if relax.lo[kind * L + l] < relax.hi[kind * L + l]:
                fix[kind * L + l] = 0.0 if l in dropped else 1.0
                if l in dropped:
                    fix[var * L + l] = 0.0
    return fix


def drop_least_kept(relax: Relaxation, x: np.ndarray, fix: dict) -> dict | None:
    """One more sub-block removed from a pinned structure: the kept one the LP kept least
    (ties: the later layer). None when nothing removable is left."""
    L = relax.L
    cands = []
    for kind, var in ((A, K), (G, W)):
        for l in range(L):
            i = kind * L + l
            if fix.get(i) == 1.0 and relax.lo[i] < 1:
                cands.append((x[i], -l, i, var * L + l))
    if not cands:
        return None
    _, _, i, v = min(cands)
    out = dict(fix)
    out[i], out[v] = 0.0, 0.0
    return out
