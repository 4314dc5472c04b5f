"""Continuous relaxation of the contract as a linear program (solved with cvxpy + HiGHS).

For one global hidden size d, the variables per layer l are
  a_l in [0,1] attention kept, k_l in [0, KV_l] KV heads (kmin a_l <= k_l <= KV_l a_l),
  g_l in [0,1] FFN kept,       w_l in [0, I_l] FFN width (step g_l <= w_l <= I_l g_l; routed
                               experts for MoE layers, top_k g_l <= w_l),
  u_l >= max(a_l, g_l) the layer executes (per-layer engine overhead).
Every op's FLOPs and bytes are affine in these (``cost.roofline.block_op_table``), so an op's
roofline time max(F/peak, B/bw) is convex piecewise linear. Where one side dominates on the
whole feasible region of its (keep, size) pair the op is linear, otherwise it gets an epigraph
variable t >= both sides (the difference of two affine functions takes its extreme values at the
region's corners: (1, smallest kept size) and (1, largest) decide; at (0, 0) both sides are 0).
Latency metrics are weighted sums of engine steps (the same passes as ``cost.latency``; the decode
sum of a batch workload by a midpoint rule over KV lengths), memory is affine in weights and KV heads
with the rest of the engine's terms frozen at the parent's values (an upper bound: pruning only
shrinks activations). All constraints are normalized by their bound.

Objective: kept importance, phi_h(d/D) * sum_l (alpha_l A_l + beta_l F_l), with concave
piecewise-linear curves (``feasibility.importance``). A_l = (a_l + psi(k_l/KV_l)) / 2.
"""

from __future__ import annotations

import math
import os
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
        self.kept_min = np.zeros(4 * L)  # smallest KV heads / width / experts of a kept sub-block
        kv_min = min(sp.kv_choices) if sp.kv_choices else 0
        for l, b in enumerate(self.parent.blocks):
            m, f = b.mixer, b.ffn
            if isinstance(m, Attention):
                self.at[A * L + l], self.at[K * L + l] = 1, m.kv_heads
                hi[A * L + l], hi[K * L + l] = 1, m.kv_heads
                self.kept_min[K * L + l] = kv_min
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
                self.kept_min[W * L + l] = min(sp.ffn_step, size) if isinstance(f, MLP) else f.top_k
                if not (sp.allows("ffn") or sp.allows("depth")):
                    lo[G * L + l] = 1
                axis = "ffn" if isinstance(f, MLP) else "experts"
                if not sp.allows(axis):
                    lo[W * L + l] = size
        self.lo, self.hi = lo, hi

    # ---- latency -------------------------------------------------------------------------
    def _scales(self, cls: str) -> tuple[float, float]:
        """Seconds per FLOP and per byte of an op class (before the serial-fraction mixing)."""
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
        sf = k.serial_fraction

        def launch_of(cls: str) -> float:
            return k.graph_launch_s if graph is True or (graph == "piecewise" and cls != "attention") else k.launch_s
        const = k.step_overhead_s + sum(
            max(roofline_seconds(op, self.device, self.profile, self.nb.weight)) + op.launches * launch_of(op.cls)
            for op in model_ops(self.arch, p, self.nb))
        lin = np.zeros(4 * L)
        tws: dict = {}
        if not hasattr(self, "_groups"):  # identical blocks -> their layers (hashing 80 blocks costs)
            self._groups: dict = {}
            for l, blk in enumerate(self.arch.blocks):
                self._groups.setdefault(blk, []).append(l)
        for blk, layers in self._groups.items():
            S = np.array(layers)
            table = block_op_table(self.arch, layers[0], p, self.device, self.profile, self.nb)
            for row in table.rows:
                keep, var = (A, K) if row.part == "mixer" else (G, W)
                sl_f, sl_b = dict(row.dflops), dict(row.dbytes)
                vname = next((v for v in sl_f if v in ("kv_heads", "ffn_width", "experts")), None)
                cs, ms = self._scales(row.op.cls)
                launch = row.op.launches * launch_of(row.op.cls)
                if not vname and (self.lo[keep * L + S] == 1).all():  # frozen sub-block (Mamba mixer)
                    const += len(S) * (max(roofline_seconds(row.op, self.device, self.profile, self.nb.weight))
                                       + launch)
                    continue
                df, db = (sl_f.get(vname, 0.0), sl_b.get(vname, 0.0)) if vname else (0.0, 0.0)
                at = self.at[var * L + S] if vname else np.zeros(len(S))
                pk, pv = cs * (row.op.flops - df * at), np.full(len(S), cs * df)  # compute side, per layer
                qk, qv = ms * (row.op.bytes - db * at), np.full(len(S), ms * db)  # memory side
                if sf:  # each side carries the serial share of the other (``roofline_seconds``)
                    pk, qk, pv, qv = pk + sf * qk, qk + sf * pk, pv + sf * qv, qv + sf * pv
                lin[keep * L + S] += launch
                # dominance over the corners of the feasible (keep, var) region, (1, smallest kept
                # size) and (1, largest), where the sign of an affine difference is decided; at
                # (0, 0) both sides are 0. Exact on that region, so the LP's optimum is unchanged.
                lo_v = np.maximum(self.lo[var * L + S], self.kept_min[var * L + S]) if vname else 0.0
                hi_v = self.hi[var * L + S] if vname else 0.0
                d_lo, d_hi = (pk - qk) + (pv - qv) * lo_v, (pk - qk) + (pv - qv) * hi_v
                comp = (d_lo >= 0) & (d_hi >= 0)
                mem = (d_lo <= 0) & (d_hi <= 0) & ~comp
                mixed = ~(comp | mem)
                np.add.at(lin, keep * L + S, np.where(comp, pk, np.where(mem, qk, 0.0)))
                if vname:
                    np.add.at(lin, var * L + S, np.where(comp, pv, np.where(mem, qv, 0.0)))
                mix = np.nonzero(mixed)[0]
                zero = np.zeros(len(S))
                first = len(self.ep)
                self.ep += zip((keep * L + S[mix]).tolist(), (var * L + S[mix]).tolist(), pk[mix].tolist(),
                               (pv if vname else zero)[mix].tolist(), qk[mix].tolist(), (qv if vname else zero)[mix].tolist())
                for j in range(first, len(self.ep)):  # each new row once, weight 1
                    tws[j] = 1.0
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
        from autocompress.cost import kv_cache_bytes

        for w in self.spec.workloads:  # KV bytes per KV head of each layer, this workload's sequences
            tokens = w.input_tokens + w.output_tokens
            kv = np.zeros(4 * L)
            per_mixer: dict = {}  # identical attention mixers hold identical KV bytes
            for l, b in enumerate(self.parent.blocks):
                if isinstance(b.mixer, Attention):
                    if b.mixer not in per_mixer:
                        one = b.mixer.__class__(b.mixer.q_heads, 1, b.mixer.head_dim, b.mixer.sliding_window)
                        single = self.arch.with_blocks((b.__class__(one, None),))
                        per_mixer[b.mixer] = kv_cache_bytes(single, w.concurrency, tokens, self.nb.kvb, self.nb.a,
                                                            1, kv_block_size(t.engine, self.device))
                    kv[K * L + l] = per_mixer[b.mixer]
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
        ri: list = []  # sparse triplets of Gm, in blocks of rows (arrays) or one row (lists)
        ci: list = []
        vi: list = []
        h: list = []  # right-hand sides, in the same blocks
        nrows = 0

        def block(cols: np.ndarray, vals: np.ndarray, rhs: np.ndarray) -> None:
            """Add rows sum_e vals[r, e] * z[cols[r, e]] <= rhs[r] (zero coefficients dropped)."""
            nonlocal nrows
            k = len(rhs)
            keep = vals != 0
            ri.append(np.broadcast_to(np.arange(nrows, nrows + k)[:, None], vals.shape)[keep])
            ci.append(np.asarray(cols)[keep])
            vi.append(np.asarray(vals, float)[keep])
            h.append(np.asarray(rhs, float))
            nrows += k

        def le(entries, b: float) -> int:
            """Add the row sum(v * z[c] for c, v in entries) <= b; return its index."""
            i = nrows
            block(np.array([[c for c, _ in entries]], int).reshape(1, -1),
                  np.array([[float(v) for _, v in entries]]).reshape(1, -1), np.array([b]))
            return i

        def dense(vec: np.ndarray, offset: int = 0):
            nz = np.nonzero(vec)[0]
            return [(offset + int(j), vec[j]) for j in nz]

        def pairs(*cols_vals) -> tuple[np.ndarray, np.ndarray]:
            """Rows from columns of (index, value) arrays, entries in the given order."""
            cols = np.stack([np.broadcast_to(c, np.shape(cols_vals[-1][1])) for c, _ in cols_vals], axis=-1)
            vals = np.stack([np.broadcast_to(np.asarray(v, float), cols.shape[:-1]) for _, v in cols_vals], axis=-1)
            return cols, vals

        layers = np.arange(L)
        # u >= a, u >= g: rows (a_l - u_l, g_l - u_l) per layer
        kinds = np.array([A, G])
        cols, vals = pairs((kinds[None, :] * L + layers[:, None], np.ones((L, 2))),
                           (np.broadcast_to(ou + layers[:, None], (L, 2)), -np.ones((L, 2))))
        block(cols.reshape(-1, 2), vals.reshape(-1, 2), np.zeros(2 * L))
        att = np.array([l for l, b in enumerate(self.parent.blocks) if isinstance(b.mixer, Attention)], int)
        ffn = np.array([l for l, b in enumerate(self.parent.blocks) if isinstance(b.ffn, (MLP, MoE))], int)
        for keep, var, ls in ((A, K, att), (G, W, ffn)):
            # kept_min * keep <= var <= hi * keep (KV heads: kv_min; FFN: step; MoE: top_k), two rows per layer
            c = np.stack([np.stack([keep * L + ls, var * L + ls], 1), np.stack([var * L + ls, keep * L + ls], 1)], 1)
            v = np.stack([np.stack([self.kept_min[var * L + ls], -np.ones(len(ls))], 1),
                          np.stack([np.ones(len(ls)), -self.hi[var * L + ls]], 1)], 1)
            block(c.reshape(-1, 2), v.reshape(-1, 2), np.zeros(2 * len(ls)))
        if nt:  # t >= P x, t >= Q x: two rows per epigraph variable
            e = np.array(self.ep, dtype=float)
            ik, iv, t = e[:, 0].astype(int), e[:, 1].astype(int), ot + np.arange(nt)
            c = np.stack([ik, iv, t], 1)[:, None, :].repeat(2, axis=1)
            v = np.stack([np.stack([e[:, 2], e[:, 3], -np.ones(nt)], 1), np.stack([e[:, 4], e[:, 5], -np.ones(nt)], 1)], 1)
            block(c.reshape(-1, 3), v.reshape(-1, 3), np.zeros(2 * nt))
        imp = self.importance
        # hypographs of the concave curves, s <= c_i + slope_i (size / parent's size - x_i) per
        # segment i, layer by layer (KV curve, then FFN curve); curves of one length at once
        att_set, ffn_set = set(att.tolist()), set(ffn.tolist())
        curves = []  # (s index, size index, curve), in row order
        for l in range(L):
            for off, var, table, present in ((os_, K, imp.kv_curves, l in att_set), (or_, W, imp.ffn_curves, l in ffn_set)):
                if present:
                    curves.append((off + l, var * L + l, table[l]))
                else:
                    lo[off + l] = hi[off + l] = 0.0
        parts = []  # (first row's rank, cols, vals, rhs) per curve length
        for n_pts in sorted({len(cv) for _, _, cv in curves}):
            idx = [i for i, (_, _, cv) in enumerate(curves) if len(cv) == n_pts]
            cv = np.array([curves[i][2] for i in idx], float)
            xs = np.linspace(0.0, 1.0, n_pts)
            slope = (cv[:, 1:] - cv[:, :-1]) / (xs[1:] - xs[:-1])
            s_col = np.array([curves[i][0] for i in idx])[:, None].repeat(n_pts - 1, axis=1)
            v_col = np.array([curves[i][1] for i in idx])[:, None].repeat(n_pts - 1, axis=1)
            cols = np.stack([s_col, v_col], axis=-1).reshape(-1, 2)
            vals = np.stack([np.ones_like(slope), -slope / self.at[v_col]], axis=-1).reshape(-1, 2)
            rank = (np.array(idx)[:, None] * 1_000_000 + np.arange(n_pts - 1)[None, :]).ravel()
            parts.append((rank, cols, vals, (cv[:, :-1] - slope * xs[:-1]).ravel()))
        if parts:
            order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
            block(np.concatenate([p[1] for p in parts])[order], np.concatenate([p[2] for p in parts])[order],
                  np.concatenate([p[3] for p in parts])[order])
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
        self.Gm = sparse.csr_matrix((np.concatenate(vi), (np.concatenate(ri), np.concatenate(ci))), shape=(nrows, n))
        self.h, self.zlo, self.zhi, self.n = np.concatenate(h), lo, hi, n

    def problem(self):
        """The compiled cvxpy problem at this hidden size (built once, DPP-parameterized).

        Variable bounds are the solver's column bounds (constant: cvxpy does not keep a problem
        with parametric bounds compiled), except for x, whose bounds move per solve (pinned
        structures): x's columns are boxed in [0, hi] and its bounds lo <= x <= hi are rows with
        parameters. Bounds as rows for all of z made HiGHS 2-3x slower and its warm start weak.
        """
        if getattr(self, "_problem", None) is None:
            cp = cvxpy()
            self._assemble()
            nx = 4 * self.L
            c, h = cp.Parameter(self.n), cp.Parameter(len(self.h))
            lo, hi = cp.Parameter(nx), cp.Parameter(nx)
            zlo = self.zlo.copy()
            zlo[:nx] = 0.0  # a pin may take a size below its box (KV heads 0: attention removed)
            z = cp.Variable(self.n, bounds=[zlo, self.zhi])
            ineq = self.Gm @ z <= h
            prob = cp.Problem(cp.Maximize(c @ z), [ineq, z[:nx] >= lo, z[:nx] <= hi])
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
          fix: dict | None = None, basis_dir: str | None = None) -> LPResult:
    """Solve the LP at one hidden size with cvxpy + HiGHS (Clarabel as fallback).

    ``objective``: "importance" (maximize kept importance) or a bound's name (minimize its
    normalized value; "memory" covers every workload's memory row). ``drop``: bounds left out.
    ``fix``: variables pinned to a value (index into x -> value).

    Warm starts: a re-solve of this hidden size's problem starts from its previous solution
    (cvxpy's ``warm_start``: pinned structures and diagnosis objectives change bounds only, ~10x
    fewer simplex iterations on the 80-layer example). A first solve with ``basis_dir`` starts
    from the optimal basis of the previous first solve of an LP of the same shape (another hidden
    size: same rows and columns, other coefficients), passed through HiGHS' own basis-file options
    (~5x fewer iterations), and leaves its own there for the next.
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
    h.value, lo.value, hi.value = hv, lov[:4 * relax.L], hiv[:4 * relax.L]  # only x is ever pinned
    attempts = [("HIGHS", {}), ("CLARABEL", {})]  # HiGHS first; the interior-point solver as fallback
    if basis_dir is not None and not getattr(relax, "_solved", False):
        basis = os.path.join(basis_dir, f"{relax.Gm.shape[0]}x{relax.Gm.shape[1]}.bas")
        start = {"read_basis_file": basis} if os.path.exists(basis) else {}
        attempts.insert(0, ("HIGHS", {**start, "write_basis_file": basis}))
    relax._solved = True
    status = None
    for solver, opts in attempts:
        try:
            with warnings.catch_warnings():  # "optimal_inaccurate" is judged below, not printed
                warnings.simplefilter("ignore")
                prob.solve(solver=solver, warm_start=True, **opts)
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


def structure_bound(relax: Relaxation, fix: dict) -> float:
    """An upper bound on the LP objective (before the hidden factor) over a pinned structure,
    without solving it: every kept sub-block at the maximum of its importance curve, a removed one
    at the curve's value at 0 (a concave curve's hypograph at 0), free keep variables kept."""
    L, imp = relax.L, relax.importance
    total = 0.0
    for l, b in enumerate(relax.parent.blocks):
        a = fix.get(A * L + l, relax.hi[A * L + l])
        g = fix.get(G * L + l, relax.hi[G * L + l])
        total += 0.5 * imp.alpha[l] * a  # the objective's coefficients (``_assemble``: c)
        if isinstance(b.mixer, Attention):
            curve = imp.kv_curves[l]
            total += 0.5 * imp.alpha[l] * (max(curve) if a > 0 else curve[0])
        if isinstance(b.ffn, (MLP, MoE)):
            curve = imp.ffn_curves[l]
            total += imp.beta[l] * (max(curve) if g > 0 else curve[0])
    return total


def shed_order(relax: Relaxation, x: np.ndarray, fix: dict) -> list[tuple[int, int]]:
    """The order in which ``drop_least_kept`` removes the sub-blocks of ``fix``, all at once:
    (keep index, size index) pairs, least kept first (ties: the later layer). Removing one never
    changes the others' ranks, so one sort replaces a search per removal."""
    L = relax.L
    cands = sorted((x[i], -(i % L), i, var * L + i % L) for kind, var in ((A, K), (G, W))
                   for i in range(kind * L, (kind + 1) * L) if fix.get(i) == 1.0 and relax.lo[i] < 1)
    return [(i, v) for _, _, i, v in cands]


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
