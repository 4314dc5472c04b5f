#!/usr/bin/env python3
"""SmolLM2-135M distillation: 2 processes (torchrun, gloo, FSDP2) against 1, at the same global batch.

The student is SmolLM2 with every FFN cut to its first ``--ffn`` channels (a pruned student that
has something to recover); the teacher is the parent, its top-32 outputs cached once by this
driver. The same rows, schedule and seed run through ``distill.distill`` in this process and
through ``distill_dist.distill_sharded`` under ``torchrun --nproc-per-node 2`` (each rank one
thread, half the rows of every step). Writes ``--out``/dist_distill.md and .json: both loss curves,
the relative difference per step, seconds per step and peak RSS per process.

    python bench/dist_distill.py                                   # 8 steps x 4 x 128 tokens (~4 min here)
    python bench/dist_distill.py --steps 3 --out /tmp/dd           # what the slow test runs
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup(args):
    """(student, teacher cache, tokens, config): the same in every process."""
    import inspect
    import json as json_mod
    import textwrap
    from dataclasses import replace

    import torch
    from transformers import AutoTokenizer

    from autocompress.train.distill import DistillConfig
    from autocompress.prune.extract import extract, student_model
    from autocompress.data.teacher import cache_teacher
    from autocompress.export.gguf_convert import convert_alias
    from autocompress.ir import MLP
    from autocompress.nn.llama import forward, load_llama
    from autocompress.parents.hf_config import architecture_from_config

    folder = convert_alias("smollm2-135m")
    params, cfg = load_llama(folder)
    text = "\n\n".join(inspect.getsource(m) for m in (json_mod, textwrap, argparse, inspect))
    ids = AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"]
    n, T = args.rows, args.seq
    assert len(ids) >= n * (T + 1), "not enough text for the rows"
    tokens = torch.tensor(ids[: n * (T + 1)]).view(n, T + 1)
    parent = architecture_from_config(json.loads((folder / "config.json").read_text()), "smollm2-135m")
    arch = replace(parent, blocks=tuple(replace(b, ffn=MLP(args.ffn)) for b in parent.blocks))
    state, llama_globals = extract(params, cfg, arch)
    teacher = cache_teacher(lambda x: forward(params, cfg, x), tokens, "smollm2-135m", k=32, batch=4,
                            cache_dir=Path(args.work) / "teacher")
    dcfg = DistillConfig(steps=args.steps, batch=args.batch, lr=3e-4, seed=0, ckpt_every=10**9)
    return student_model(arch, state, llama_globals), teacher, tokens, dcfg


def run(args) -> dict:
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=4, help="rows per step (the global batch)")
    p.add_argument("--ffn", type=int, default=768, help="the student's FFN width (parent: 1536)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where the tables go")
    p.add_argument("--work", default=str(ROOT / "bench" / "work" / "dist_distill"), help="teacher cache")
    p.add_argument("--worker", help="internal: write this run's JSON here")
    args = p.parse_args()
    if args.worker:
        res = run(args)
        if int(os.environ.get("RANK", "0")) == 0:
            Path(args.worker).write_text(json.dumps(res))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setup(args)  # fills the teacher cache once, before either run
    common = [f"--steps={args.steps}", f"--rows={args.rows}", f"--seq={args.seq}", f"--batch={args.batch}",
              f"--ffn={args.ffn}", f"--out={out}", f"--work={args.work}"]
    runs = {}
    for name, launcher in (("1 process", [sys.executable]),
                           ("2 processes", [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                            "--nproc-per-node=2"])):
        dest = out / f".dist_distill-{len(runs)}.json"
        env = {**os.environ, "OMP_NUM_THREADS": "2" if len(runs) == 0 else "1"}
        subprocess.run([*launcher, str(Path(__file__).resolve()), *common, f"--worker={dest}"], check=True, env=env)
        runs[name] = json.loads(dest.read_text())
        dest.unlink()
    one, two = runs["1 process"]["losses"], runs["2 processes"]["losses"]
    rel = [abs(b - a) / abs(a) for a, b in zip(one, two)]
    result = {"args": {k: v for k, v in vars(args).items() if k not in ("out", "work", "worker")}, "runs": runs,
              "relative_difference": rel, "max_relative_difference": max(rel), "python": platform.python_version(),
              "command": "python bench/dist_distill.py " + " ".join(
                  c for c in common if not c.startswith(("--out", "--work")))}
    (out / "dist_distill.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "dist_distill.md").write_text(render(result))
    print(render(result))


def render(r: dict) -> str:
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


if __name__ == "__main__":
    main()
