#!/usr/bin/env python3
"""Memory per GPU and stage times of a distributed ``acc build`` at 70B scale: the numbers of docs/scale-out.md.

Parent: the ``model`` of ``--spec`` (default: Llama-3.1-70B, examples/llama70b-h100-32k.acspec);
student: the architecture ``acc check`` starts from for that contract (the search refines it).
Distillation in BF16 with FSDP2 over ``--gpus`` GPUs of ``--hardware`` (one node, NVLink).

* memory: arithmetic on the IR's parameter counts, every line with its formula;
* time: the cost model's roofline (``cost.roofline``: per-op FLOPs and bytes of a forward pass,
  the built-in GPU profile's efficiencies, never measured for training) times the number of
  forwards each stage runs; a training step is 3 forwards (backward = 2x the forward's FLOPs),
  4 with activation checkpointing; FSDP2's all-gathers and reduce-scatters over the catalog's
  link bandwidth, overlapped with compute (the step takes the larger of the two).

    python bench/scale_out.py                          # print the tables
    python bench/scale_out.py --check docs/scale-out.md    # exit 1 if the doc's tables differ
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GiB = 2**30
BEGIN, END = "<!-- scale_out.py: begin -->", "<!-- scale_out.py: end -->"


@dataclass(frozen=True)
class Setup:
    gpus: int = 8
    hardware: str = "h100-sxm"
    seq: int = 4096  # tokens per row
    rows_per_gpu: int = 1  # rows per GPU per micro-batch
    global_rows: int = 256  # rows per optimizer step (1M tokens at 4096)
    topk: int = 32
    calib_rows: int = 1024  # Minitron's calibration size
    ablation_rows: int = 16  # removal KL: 2L + 1 forwards of these
    router_steps: int = 200
    search_rows: int = 8  # router / refinement batch (rows of search_seq tokens)
    search_seq: int = 1024
    spec: str = "examples/llama70b-h100-32k.acspec"


def architectures(spec_path: str):
    """(parent, student): the spec's parent and the architecture ``acc check`` starts from."""
    from autocompress.feasibility.assess import assess
    from autocompress.feasibility.objective import prior_importance
    from autocompress.lang.api import load_spec
    from autocompress.parents.resolve import resolve_parent
    from autocompress.plan.derive import derive

    path = str(ROOT / spec_path)
    spec = load_spec(path)
    base = str(Path(path).parent)
    parent = resolve_parent(spec.parent, base).architecture
    derived = derive(spec, parent, base)
    feas = assess(spec, parent, derived.profile, derived.device, derived.space, prior_importance(parent),
                  derived.limits, diagnose=False)
    return parent, feas.start.evaluation.arch


def _layer_params(arch) -> list[int]:
    d = arch.hidden_size
    return [(b.mixer.params(d) + d if b.mixer else 0) + (b.ffn.params(d) + d if b.ffn else 0) for b in arch.blocks]


def _saved_per_token(arch) -> list[int]:
    """Elements a decoder layer keeps per token for its backward (bf16): attention 4d... see the doc."""
    d, out = arch.hidden_size, []
    for b in arch.blocks:
        n = 0
        if b.mixer:  # norm in/out, q k v (flash attention keeps them and its output; no s^2 scores), o_proj in
            a = b.mixer
            n += 2 * d + 2 * a.q_heads * a.head_dim + 2 * a.kv_heads * a.head_dim
        if b.ffn:  # norm in/out, gate and up outputs, down_proj input
            n += 2 * d + 3 * b.ffn.width
        out.append(n)
    return out


def memory(parent, student, s: Setup) -> list[tuple[str, float, str]]:
    """Distillation on one GPU: (item, GiB, formula). BF16 parameters and gradients, FP32 AdamW moments."""
    N, P, Pt = s.gpus, student.params(), parent.params()
    tok = s.rows_per_gpu * s.seq
    big = max(_layer_params(student))
    saved = _saved_per_token(student)
    d, V, L = student.hidden_size, student.vocab_size, student.num_layers
    return [
        ("student weights (bf16, sharded)", 2 * P / N, "2 B x P_s / N"),
        ("student gradients (bf16, sharded)", 2 * P / N, "2 B x P_s / N"),
        ("AdamW moments (fp32, sharded)", 8 * P / N, "8 B x P_s / N"),
        ("gathered layers (bf16, 2 in flight, forward and backward)", 2 * 2 * 2 * big, "2 B x 2 x 2 x largest layer"),
        ("activations, no checkpointing", 2 * tok * sum(saved), "2 B x tokens x sum of saved elements per layer"),
        ("activations, checkpoint per layer", 2 * tok * (d * L + max(saved)), "2 B x tokens x (d x L + one layer)"),
        ("logits and their gradient", 10 * tok * V, "(2 + 4 + 4) B x tokens x V: bf16, fp32 log-softmax, grad"),
        ("teacher, precomputed top-k (read from disk)", tok * (6 * s.topk + 4), "(6 k + 4) B x tokens"),
        ("teacher, live (hidden-state KD: bf16, sharded)", 2 * Pt / N + 2 * 2 * max(_layer_params(parent)),
         "2 B x P_t / N + 2 gathered layers"),
        ("CUDA context, NCCL buffers (estimate)", 1.0 * GiB, "~1 GiB"),
    ]


def _forward(arch, rows: int, seq: int, device, profile) -> float:
    """Seconds of one forward pass of ``rows`` x ``seq`` tokens on one GPU (every position's logits)."""
    from autocompress.cost.roofline import Numerics, Pass, Segment, block_ops, model_ops, op_time

    p = Pass((Segment(rows, seq, 0.0, rows * seq),))
    nb = Numerics("bf16", "bf16", 1)
    ops = [o for b in arch.blocks for o in block_ops(arch, b, p, nb)]
    ops += [o for o in model_ops(arch, p, nb) if o.name != "sampler"]  # training samples nothing
    return sum(op_time(o, device, profile, "bf16") for o in ops)


def stage_times(parent, student, s: Setup) -> list[tuple[str, str, float, str]]:
    """(stage, what runs, hours on the node, how it splits over the GPUs)."""
    from autocompress.catalog.hardware import HARDWARE
    from autocompress.search.refine import RefineConfig
    from autocompress.cost.profile import load_profile

    dev = HARDWARE[s.hardware]
    prof = load_profile(None, dev, "vllm")
    N, L = s.gpus, parent.num_layers
    fwd_t = _forward(parent, s.rows_per_gpu, s.seq, dev, prof) / (s.rows_per_gpu * s.seq)  # s per token, 1 GPU
    fwd_s = _forward(student, s.rows_per_gpu, s.seq, dev, prof) / (s.rows_per_gpu * s.seq)
    srch = _forward(parent, s.search_rows, s.search_seq, dev, prof)  # one supernet-size forward, one GPU
    link = dev.link_bandwidth_bytes_s * prof.eff("comm").memory
    # FSDP2 per micro-batch: all-gather (forward), all-gather (backward), reduce-scatter: 3 x 2 B x P x (N-1)/N
    comm = 3 * 2 * student.params() * (N - 1) / N / link
    micro = s.rows_per_gpu * s.seq
    step_compute = 4 * fwd_s * micro  # forward, backward (2x), recompute (activation checkpointing)
    billion = 1e9 / (N * micro)  # micro-batches per GPU per 1B tokens
    h = 1 / 3600
    teacher_1b = 1e9 * fwd_t / N * h
    rows = [
        ("teacher top-k, per 1B tokens", f"parent forward; cache {6 * s.topk + 4} GB on disk",
         teacher_1b, "rows split over the GPUs"),
        ("importance", f"{s.calib_rows} + {2 * L + 1} x {s.ablation_rows} rows x {s.seq} (parent forwards)",
         (s.calib_rows + (2 * L + 1) * s.ablation_rows) * s.seq * fwd_t / N * h, "batches, then sub-blocks split"),
        ("search: router", f"{s.router_steps} steps x 3 forwards of {s.search_rows} x {s.search_seq}",
         s.router_steps * 3 * srch * h, "no: every GPU runs it"),
        ("search: refinement (budget)", f"<= {RefineConfig().max_evals} forwards of {s.search_rows} x {s.search_seq} "
         "per hidden size", RefineConfig().max_evals * srch / N * h, "each round's moves split"),
        ("distill, per 1B tokens (compute)", f"4 student forwards per micro-batch of {micro} tokens",
         billion * step_compute * h, "data parallel"),
        ("distill, per 1B tokens (FSDP2 traffic)", f"3 x 2 B x P_s x {N - 1}/{N} per micro-batch",
         billion * comm * h, "overlapped with compute"),
        ("distill, live teacher, per 1B tokens (extra)", "teacher forward + its all-gather",
         billion * max(fwd_t * micro, 2 * parent.params() * (N - 1) / N / link) * h, "data parallel"),
    ]
    return rows


def fits(parent, student, s: Setup, moment_bytes: int = 8, limit: float = 80 * GiB) -> tuple[float, int]:
    """(GiB per GPU with a precomputed teacher and per-layer checkpointing, the fewest GPUs that stay
    under ``limit``), with AdamW moments of ``moment_bytes`` per parameter (8: fp32, 4: bf16)."""
    from dataclasses import replace

    def total(n: int) -> float:
        m = {k: g for k, g, _ in memory(parent, student, replace(s, gpus=n))}
        m["AdamW moments (fp32, sharded)"] *= moment_bytes / 8
        return sum(m[k] for k in m if not k.startswith(("activations, no", "teacher, live")))
    n = 1
    while total(n) > limit and n < 1024:
        n += 1
    return total(s.gpus) / GiB, n


def render(parent, student, s: Setup) -> str:
    full = parent  # the unpruned size: a student that keeps all of the parent (upper bound)
    mems = [memory(parent, student, s), memory(parent, full, s)]
    lines = [BEGIN, "",
             f"Command: `python bench/scale_out.py`. Parent: `{s.spec}`'s model, {parent.params() / 1e9:.1f}B parameters, "
             f"{parent.num_layers} layers, hidden {parent.hidden_size}, vocab {parent.vocab_size}. Student: the start "
             f"`acc check` finds for that contract ({student.params() / 1e9:.1f}B, hidden {student.hidden_size}), and "
             f"for comparison one of the parent's size. {s.gpus} x {s.hardware}, {s.rows_per_gpu} x {s.seq} tokens "
             f"per GPU per micro-batch, {s.global_rows} rows per optimizer step.", "",
             f"| per GPU, distillation | student {student.params() / 1e9:.1f}B, GiB | "
             f"student {full.params() / 1e9:.1f}B, GiB | formula |", "|---|---|---|---|"]
    lines += [f"| {n} | {a / GiB:.1f} | {b / GiB:.1f} | {f} |" for (n, a, f), (_, b, _) in zip(*mems)]
    lines += [""]
    for arch in (student, full):
        fp32, n32 = fits(parent, arch, s)
        bf16, n16 = fits(parent, arch, s, moment_bytes=4)
        lines.append(f"- student {arch.params() / 1e9:.1f}B, precomputed teacher, checkpointing per layer: "
                     f"**{fp32:.1f} GiB** per GPU with fp32 AdamW moments (fits 80 GiB from {n32} GPUs), "
                     f"**{bf16:.1f} GiB** with bf16 moments (from {n16} GPUs).")
    lines += ["", "| stage | what runs | hours on the node | splits over GPUs |", "|---|---|---|---|"]
    lines += [f"| {n} | {w} | {t:.2f} | {how} |" for n, w, t, how in stage_times(parent, student, s)]
    lines += ["", END]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", metavar="DOC", help="compare with the tables in DOC (between the markers)")
    args = p.parse_args()
    s = Setup()
    text = render(*architectures(s.spec), s)
    if args.check:
        doc = Path(args.check).read_text()
        found = doc[doc.index(BEGIN): doc.index(END) + len(END)] if BEGIN in doc and END in doc else ""
        if found != text:
            sys.stderr.write(f"{args.check}: the tables differ from `python bench/scale_out.py`; paste its output\n")
            return 1
        return 0
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
