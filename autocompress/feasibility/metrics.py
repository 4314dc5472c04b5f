"""The relaxation's cost rows: every bound of the contract as an affine function of per-layer sizes.

The linear program built from them is ``lp``; pinned structures are ``pins``.

For one global hidden size d, the variables per layer l are
  a_l in [0,1] attention kept, k_l in [0, KV_l] KV heads (kmin a_l <= k_l <= KV_l a_l),
  g_l in [0,1] FFN kept,       w_l in [0, I_l] FFN width (step g_l <= w_l <= I_l g_l; routed
                               experts for MoE layers, top_k g_l <= w_l),
  u_l >= max(a_l, g_l) the layer executes (per-layer engine overhead).
Every op's FLOPs and bytes are affine in these (``cost.op_tables.block_op_table``), so an op's
roofline time max(F/peak, B/bw) is convex piecewise linear. Where one side dominates on the
whole feasible region of its (keep, size) pair the op is linear, otherwise it gets an epigraph
variable t >= both sides (the difference of two affine functions takes its extreme values at the
region's corners: (1, smallest kept size) and (1, largest) decide; at (0, 0) both sides are 0).
Latency metrics are weighted sums of engine steps (the same passes as ``cost.latency``; the decode
sum of a batch workload by a midpoint rule over KV lengths), memory is affine in weights and KV heads
with the rest of the engine's terms frozen at the parent's values (an upper bound: pruning only
shrinks activations; except the cost per distinct GEMM shape, charged at the parent's count,
which a mixed architecture exceeds: the exact check charges it). All constraints are normalized by their bound.

Objective: kept importance, phi_h(d/D) * sum_l (alpha_l A_l + beta_l F_l), with concave
piecewise-linear curves (``feasibility.importance``). A_l = (a_l + psi(k_l/KV_l)) / 2.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from autocompress.catalog.engines import kv_block_size
from autocompress.cost.schedule import workload_plan
from autocompress.cost.memory import kv_cache_bytes, memory_breakdown
from autocompress.cost.roofline import Numerics, Op, Pass, charged_bytes, model_ops, roofline_seconds
from autocompress.cost.op_tables import block_op_table
from autocompress.ir import MLP, Architecture, Attention, Block, MoE
from autocompress.plan.budget import Budget, bound_name
from autocompress.plan.options import attention_removable, ffn_removable

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

    def __init__(self, parent: Architecture, d: int, spec, profile, device, space, importance, limits=None,
                 proof: bool = False):
        """``proof``: build a relaxation that is a lower bound of the exact model at every legal
        point, so its infeasibility proves the contract infeasible (``assess``): batch decode
        steps are charged at the first KV length (every step costs at least that: costs grow with
        the KV length), and memory's architecture-dependent constants are those of the smallest
        legal architecture (activations, engine terms and vLLM-CPU's whole-GiB KV reservation all
        grow with the sizes). The default relaxation is tighter and steers the search."""
        self.proof = proof
        self.parent, self.d, self.spec, self.profile, self.device = parent, d, spec, profile, device
        self.budget = Budget.of(spec)  # the bounds its rows hold (``bound_rows``)
        self.limits = limits
        self.space, self.importance = space, importance
        self.arch = parent.with_blocks(parent.blocks, hidden_size=d)
        self.L = parent.num_layers
        self.nb = Numerics.from_target(spec.target)
        self.ep: list[tuple] = []  # epigraph rows (keep idx, var idx, P_keep, P_var, Q_keep, Q_var)
        self._scale_of: dict[str, tuple[float, float]] = {}  # op class -> (s per FLOP, s per byte)
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
                if not attention_removable(sp, l):  # one source with the search's options
                    lo[A * L + l] = 1
                if not sp.allows("kv_heads"):
                    lo[K * L + l] = m.kv_heads
            elif m is not None:  # Mamba mixers are not compressed by the LP: frozen at the parent's
                self.at[A * L + l] = lo[A * L + l] = hi[A * L + l] = 1
            if isinstance(f, (MLP, MoE)):
                size = f.width if isinstance(f, MLP) else f.experts
                self.at[G * L + l], self.at[W * L + l] = 1, size
                hi[G * L + l], hi[W * L + l] = 1, size
                self.kept_min[W * L + l] = min(sp.ffn_step, size) if isinstance(f, MLP) else f.top_k
                if not ffn_removable(sp):
                    lo[G * L + l] = 1
                axis = "ffn" if isinstance(f, MLP) else "experts"
                if not sp.allows(axis):
                    lo[W * L + l] = size
        self.lo, self.hi = lo, hi

    # ---- latency -------------------------------------------------------------------------
    def _scales(self, cls: str) -> tuple[float, float]:
        """Seconds per FLOP and per byte of an op class (before the serial-fraction mixing)."""
        if cls not in self._scale_of:
            c, _ = roofline_seconds(Op("u", 1.0, 0.0, 0.0, cls), self.device, self.profile, self.nb.weight)
            _, m = roofline_seconds(Op("u", 0.0, 1.0, 0.0, cls), self.device, self.profile, self.nb.weight)
            self._scale_of[cls] = (c, m)
        return self._scale_of[cls]

    def _step(self, p: Pass, graph: bool | str) -> tuple[float, np.ndarray, dict, float]:
        """(const, lin, epigraph rows, per-layer overhead) of one engine step, affine in x.

        Mirrors ``cost.latency.step_cost``: ``graph`` False (eager), True (full CUDA graph) or
        "piecewise" (graph launches except the attention core; per-layer overhead stays).
        Identical blocks share one op table and are placed for all their layers at once, all the
        table's rows together (arrays of rows x layers; each value is added to ``lin`` in the
        order of the rows, so the sums are those of one row at a time).
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
            live = []  # rows that vary with x: (keep, var, has a size variable, flops, bytes, dflops, dbytes, scales, launch)
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
                live.append((keep, var, vname is not None, row.op.flops, charged_bytes(row.op, self.profile), df, db,
                             cs, ms, launch))
            if not live:
                continue
            keep, var, has, flops, nbytes, df, db, cs, ms, launch = (np.array(c)[:, None] for c in zip(*live))
            shape = (len(live), len(S))
            kidx, vidx = keep * L + S, var * L + S  # (rows, layers)
            at = np.where(has, self.at[vidx], 0.0)
            pk, pv = cs * (flops - df * at), np.broadcast_to(cs * df, shape)  # compute side, per row and layer
            qk, qv = ms * (nbytes - db * at), np.broadcast_to(ms * db, shape)  # memory side
            if sf:  # each side carries the serial share of the other (``roofline_seconds``)
                pk, qk, pv, qv = pk + sf * qk, qk + sf * pk, pv + sf * qv, qv + sf * pv
            # dominance over the corners of the feasible (keep, var) region, (1, smallest kept
            # size) and (1, largest), where the sign of an affine difference is decided; at
            # (0, 0) both sides are 0. Exact on that region, so the LP's optimum is unchanged.
            lo_v = np.where(has, np.maximum(self.lo[vidx], self.kept_min[vidx]), 0.0)
            hi_v = np.where(has, self.hi[vidx], 0.0)
            d_lo, d_hi = (pk - qk) + (pv - qv) * lo_v, (pk - qk) + (pv - qv) * hi_v
            comp = (d_lo >= 0) & (d_hi >= 0)
            mem = (d_lo <= 0) & (d_hi <= 0) & ~comp
            mixed = ~(comp | mem)
            pv, qv = np.where(has, pv, 0.0), np.where(has, qv, 0.0)
            # per row, in order: the launches and the keep side on the keep variable, the size side
            # on the size variable (rows that have one)
            idx = np.stack([kidx, kidx, vidx], axis=1)
            val = np.stack([np.broadcast_to(launch, shape), np.where(comp, pk, np.where(mem, qk, 0.0)),
                            np.where(comp, pv, np.where(mem, qv, 0.0))], axis=1)
            use = np.ones(idx.shape, bool)
            use[:, 2, :] = has
            np.add.at(lin, idx[use], val[use])
            rows, cols = np.nonzero(mixed)  # row by row, layers in order
            first = len(self.ep)
            self.ep += zip(kidx[rows, cols].tolist(), vidx[rows, cols].tolist(), pk[rows, cols].tolist(),
                           pv[rows, cols].tolist(), qk[rows, cols].tolist(), qv[rows, cols].tolist())
            for j in range(first, len(self.ep)):  # each new row once, weight 1
                tws[j] = 1.0
        if graph is not True:  # per executed sub-block (``latency.sub_block_overhead``): on its keep variable
            attn = k.attention_overhead_s + p.seqs * k.attention_seq_overhead_s
            for l, b in enumerate(self.parent.blocks):
                if b.mixer is not None:
                    lin[A * L + l] += k.sub_block_overhead_s + (attn if isinstance(b.mixer, Attention) else 0.0)
                if b.ffn is not None:
                    lin[G * L + l] += k.sub_block_overhead_s
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
        if steps > 0 and plan.mode == "batch" and self.proof:  # a lower bound: every step at the first KV length
            self._add(decode, self._step(plan.decode_pass(plan.kv_lo), plan.decode_graph), steps)
        elif steps > 0 and plan.mode == "batch":  # midpoint rule over the KV lengths
            pts = min(DECODE_POINTS, steps)
            for j in range(pts):
                kv = plan.kv_lo + (j + 0.5) * steps / pts - 0.5
                self._add(decode, self._step(plan.decode_pass(kv), plan.decode_graph), steps / pts)
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
            self.metrics[bound_name(w.name, name)] = Metric(name, parts[0], parts[1], parts[2], parts[3])

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
        self.param_lin = wlin / wb * t.tensor_parallel  # kept block parameters (linear layers)
        kvs = []
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
        small = x_to_arch(self, np.where(self.lo > 0, np.maximum(self.lo, self.kept_min), 0.0), floor=True)
        low = memory_breakdown(small, t, self.spec.workloads, self.profile, self.device, self.limits)
        # the constants: of the parent (an upper bound, steering) or of the smallest legal
        # architecture (a lower bound, the proof; see __init__). The profile's cost per distinct
        # GEMM shape (``cost.memory.gemm_shapes``, vllm-cpu) is a count, not affine in x, and is
        # in them too: the parent's count steering (a uniform point at any sizes has it, a mixed
        # one more, which the exact check charges), the smallest one's for the proof (every legal
        # architecture keeps at least its shapes)
        at, ref = (arch_to_x(self, small), low) if self.proof else (self.at, mem)
        kv_ref = max(float(kv @ at) for _, kv in kvs)
        const = ref.total_bytes - (1 + mf) * float(wlin @ at) - max(kv_ref, ref.kv_reserved_bytes)
        if self.proof:
            const -= 64.0  # the margin's ceil() rounds each architecture by < 1 byte
        # vLLM CPU reserves whole GiB: the LP charges max(KV, the smallest architecture's reservation)
        # and leaves the rounding to the exact check; the parent's reservation as the floor would make
        # a contract that must shrink the KV cache below it look impossible
        floor = low.kv_reserved_bytes if low.cpu_kv_space_gib else 0.0
        self.mem_const, self.mem_w, self.mem_kvs, self.mem_floor = const, (1 + mf) * wlin, kvs, floor
        bound = self.budget.memory
        self.mem_limit = bound.scale if bound else float(mem.limit_bytes)
        if t.engine == "vllm" and self.device.kind == "gpu" and bound is None:
            self.mem_limit = float(mem.requested_bytes)

    # ---- problem assembly -------------------------------------------------------------------
    def bound_rows(self) -> dict[str, tuple[float, np.ndarray, float]]:
        """name -> (const, row over x/u/t, scale) for each bound of the contract (memory apart): the
        bound is ``(const + row @ z) / scale <= 1`` (``plan.budget``: throughput through E2E)."""
        L, nt = self.L, self.nt
        out = {}
        for name, b in self.budget.rows.items():
            m = self.metrics[b.row]
            row = np.zeros(5 * L + nt)
            row[:4 * L] = m.lin
            row[4 * L:5 * L] = m.uw
            for j, v in m.tw.items():
                row[5 * L + j] += v
            out[name] = (m.const, row, b.scale)
        return out


# ---- points and architectures ------------------------------------------------------------------
def x_to_arch(relax: Relaxation, x: np.ndarray, floor: bool = False) -> Architecture:
    """Round an LP point to legal sizes: to the nearest, or (``floor``) down, which keeps a
    feasible point feasible since every cost grows with every size."""
    L, sp, parent = relax.L, relax.space, relax.parent
    blocks = []
    for l, b in enumerate(parent.blocks):
        m, f = b.mixer, b.ffn
        if isinstance(m, Attention):
            if x[A * L + l] >= 0.5 or relax.lo[A * L + l] == 1:
                choices = sp.kv_choices or (m.kv_heads,)
                below = [c for c in choices if c <= x[K * L + l] + 1e-6]
                kv = (max(below) if below else min(choices)) if floor else \
                    min(choices, key=lambda c: (abs(c - x[K * L + l]), -c))
                m = replace(m, kv_heads=kv)
            else:
                m = None
        if isinstance(f, MLP):
            step = min(sp.ffn_step, f.width)
            q = x[W * L + l] / step
            width = int(np.floor(q + 1e-6) if floor else round(q)) * step
            f = replace(f, width=min(width, f.width)) if (x[G * L + l] >= 0.5 and width >= step) else None
        elif isinstance(f, MoE):
            if x[G * L + l] >= 0.5:
                e = min(sp.expert_choices or (f.experts,), key=lambda c: abs(c - x[W * L + l]))
                f = replace(f, experts=e)
            else:
                f = None
        blocks.append(Block(m, f))
    return relax.arch.with_blocks(tuple(blocks))


def arch_to_x(relax: Relaxation, arch: Architecture) -> np.ndarray:
    L = relax.L
    x = np.zeros(4 * L)
    for l, b in enumerate(arch.blocks):
        if b.mixer is not None:
            x[A * L + l] = 1
            if isinstance(b.mixer, Attention):
                x[K * L + l] = b.mixer.kv_heads
        if isinstance(b.ffn, MLP):
            x[G * L + l], x[W * L + l] = 1, b.ffn.width
        elif isinstance(b.ffn, MoE):
            x[G * L + l], x[W * L + l] = 1, b.ffn.experts
    return x
