#!/usr/bin/env python3
"""Scale-out: memory per GPU and stage times of a distributed ``acc build`` at 70B scale (the numbers
of docs/scale-out.md), and a 2-process distillation measured against 1 process.

Parent: the ``model`` of ``--spec`` (default: Llama-3.1-70B, examples/llama70b-h100-32k.acspec);
student: the architecture ``acc check`` starts from for that contract (the search refines it).
Distillation in BF16 with FSDP2 over ``--gpus`` GPUs of ``--hardware`` (one node, NVLink).

* memory: arithmetic on the IR's parameter counts, every line with its formula;
* time: the cost model's roofline (``cost.roofline``: per-op FLOPs and bytes of a forward pass,
  the built-in GPU profile's efficiencies, never measured for training) times the number of
  forwards each stage runs; a training step is 3 forwards (backward = 2x the forward's FLOPs),
  4 with activation checkpointing; FSDP2's all-gathers and reduce-scatters over the catalog's
  link bandwidth, overlapped with compute (the step takes the larger of the two).

The measured part, ``distill``: SmolLM2-135M with every FFN cut to its first ``--ffn`` channels
(a pruned student that has something to recover) distilled from the parent's top-32 outputs,
cached once by the driver. The same rows, schedule and seed run through ``distill.distill`` in one
process and through ``distill_dist.distill_sharded`` under ``torchrun --nproc-per-node 2`` (gloo,
FSDP2, each rank one thread, half the rows of every step); the table gives both loss curves, the
relative difference per step, seconds per step and peak RSS per process.

    python bench/scale_out.py                              # print the tables
    python bench/scale_out.py --check docs/scale-out.md    # exit 1 if the doc's tables differ
    python bench/scale_out.py distill [--steps 8] [--out bench/results/scale_out]   # ~4 min on 2 cores

Self-contained (autocompress only), so it runs as a file or as ``python -m bench.scale_out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
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


def setup(args):
    """(student, teacher cache, tokens, config): the same in every process."""
    import inspect
    import json as json_mod
    import textwrap
    from dataclasses import replace

    import torch
    from transformers import AutoTokenizer

    from autocompress.train.distill import DistillConfig
    from autocompress.families.llama.load import load
    from autocompress.families.llama.student import student_model
    from autocompress.prune.extract import extract
    from autocompress.data.teacher import cache_teacher
    from autocompress.export.gguf_convert import convert_alias
    from autocompress.ir import MLP
    from autocompress.nn.hybrid import forward
    from autocompress.parents.hf_config import architecture_from_config

    folder = convert_alias("smollm2-135m")
    params, cfg = load(folder)
    text = "\n\n".join(inspect.getsource(m) for m in (json_mod, textwrap, argparse, inspect))
    ids = AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"]
    n, T = args.rows, args.seq
    assert len(ids) >= n * (T + 1), "not enough text for the rows"
    tokens = torch.tensor(ids[: n * (T + 1)]).view(n, T + 1)
    parent = architecture_from_config(json.loads((folder / "config.json").read_text()), "smollm2-135m")
    arch = replace(parent, blocks=tuple(replace(b, ffn=MLP(args.ffn)) for b in parent.blocks))
    state, extras = extract(params, cfg, arch)
    teacher = cache_teacher(lambda x: forward(params, cfg, x), tokens, "smollm2-135m", k=32, batch=4,
                            cache_dir=Path(args.work) / "teacher")
    dcfg = DistillConfig(steps=args.steps, batch=args.batch, lr=3e-4, seed=0, ckpt_every=10**9)
    return student_model(arch, state, extras), teacher, tokens, dcfg


def distill_one(args) -> dict:
    """One run in this process: single (no launcher) or one rank of the torchrun launch."""
    import torch

    from autocompress.build import dist

    if dist.launched():
        dist.init()
    student, teacher, tokens, dcfg = setup(args)
    load = os.getloadavg()[0]
    t = time.perf_counter()
    if dist.active():
        from autocompress.train.distill_dist import distill_sharded

        res, _ = distill_sharded(student, teacher, tokens, dcfg)
    else:
        from autocompress.train.distill import distill

        res = distill(student, teacher, tokens, dcfg)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20], dtype=torch.float64)  # GiB
    peak = dist.gather_rows(rss, dist.world()).tolist()
    out = {"world": dist.world(), "threads": torch.get_num_threads(), "losses": res.losses, "seconds": res.seconds,
           "wall": time.perf_counter() - t, "peak_rss_gib": peak, "load": load}
    dist.shutdown()
    return out


def render_distill(r: dict) -> str:
    a = r["args"]
    one, two = r["runs"]["1 process"], r["runs"]["2 processes"]
    lines = [
        "# SmolLM2-135M distillation: 2 processes against 1 (same global batch)", "",
        f"Command: `{r['command']}`. Student: SmolLM2 with FFN width {a['ffn']} (of 1536); teacher: the parent's "
        f"top-32 outputs; {a['steps']} steps x {a['batch']} rows x {a['seq']} tokens, AdamW lr 3e-4, seed 0.",
        f"1 process: {one['threads']} threads; 2 processes: torchrun, gloo, FSDP2, {two['threads']} thread each, "
        f"{a['batch'] // 2} rows per rank per step.", "",
        "| step | loss, 1 process | loss, 2 processes | relative difference |", "|---|---|---|---|",
    ]
    for i, (x, y, d) in enumerate(zip(one["losses"], two["losses"], r["relative_difference"])):
        lines.append(f"| {i + 1} | {x:.6f} | {y:.6f} | {d:.1e} |")
    per = lambda run: run["seconds"] / max(1, len(run["losses"]))  # noqa: E731
    lines += ["", f"Largest relative difference: **{r['max_relative_difference']:.1e}** (goal: below 1e-3).", "",
              "| | s/step (mean) | peak RSS per process |", "|---|---|---|",
              f"| 1 process | {per(one):.2f} | {', '.join(f'{g:.2f} GiB' for g in one['peak_rss_gib'])} |",
              f"| 2 processes | {per(two):.2f} | {', '.join(f'{g:.2f} GiB' for g in two['peak_rss_gib'])} |", "",
              f"Load average when each run started: {one['load']:.1f} and {two['load']:.1f} (2 cores, shared "
              "with other jobs: the timings say how this host was, not how the recipes compare; the loss "
              "curves do not depend on it).", ""]
    return "\n".join(lines)



def add_distill_arguments(ap) -> None:
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4, help="rows per step (the global batch)")
    ap.add_argument("--ffn", type=int, default=768, help="the student's FFN width (parent: 1536)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale_out"),
                    help="where distill.md and distill.json go")
    ap.add_argument("--work", default=str(ROOT / "bench" / "work" / "dist_distill"), help="teacher cache")
    ap.add_argument("--worker", help="internal: write this run's JSON here")


def distill_main(args) -> int:
    """The two runs, each in fresh processes, and their table."""
    if args.worker:
        res = distill_one(args)
        if int(os.environ.get("RANK", "0")) == 0:
            Path(args.worker).write_text(json.dumps(res))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setup(args)  # fills the teacher cache once, before either run
    common = [f"--steps={args.steps}", f"--rows={args.rows}", f"--seq={args.seq}", f"--batch={args.batch}",
              f"--ffn={args.ffn}", f"--out={out}", f"--work={args.work}"]
    runs = {}
    for name, launcher in (("1 process", [sys.executable]),
                           ("2 processes", [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                            "--nproc-per-node=2"])):
        dest = out / f".distill-{len(runs)}.json"
        env = {**os.environ, "OMP_NUM_THREADS": "2" if len(runs) == 0 else "1"}
        subprocess.run([*launcher, str(Path(__file__).resolve()), "distill", *common, f"--worker={dest}"],
                       check=True, env=env)
        runs[name] = json.loads(dest.read_text())
        dest.unlink()
    one, two = runs["1 process"]["losses"], runs["2 processes"]["losses"]
    rel = [abs(b - a) / abs(a) for a, b in zip(one, two)]
    result = {"args": {k: v for k, v in vars(args).items() if k not in ("out", "work", "worker", "mode", "check")},
              "runs": runs, "relative_difference": rel, "max_relative_difference": max(rel),
              "python": platform.python_version(),
              "command": "python bench/scale_out.py distill " + " ".join(
                  c for c in common if not c.startswith(("--out", "--work")))}
    (out / "distill.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "distill.md").write_text(render_distill(result))
    print(render_distill(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/scale_out.py", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--check", metavar="DOC", help="compare with the tables in DOC (between the markers)")
    modes = p.add_subparsers(dest="mode", metavar="MODE")
    add_distill_arguments(modes.add_parser("distill", help="SmolLM2-135M distillation, 2 processes (FSDP2) against 1"))
    args = p.parse_args(argv)
    if args.mode == "distill":
        return distill_main(args)
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
