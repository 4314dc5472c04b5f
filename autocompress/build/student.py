"""The student: extracted from the parent's permuted weights, distilled, exported.

Distillation checkpoints live in the stage's ``.partial`` folder, so a killed build resumes from
the last checkpoint; the exporter writes the output folder atomically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from autocompress.build.stages import crash_point, run_stage, stage_key
from autocompress.ir import MLP, Architecture, Attention, Block


def arch_from_json(a: dict, parent: Architecture) -> Architecture:
    """Inverse of ``report.feasibility._arch`` for attention / MLP layers."""
    blocks = []
    for layer, p in zip(a["layers"], parent.blocks):
        m, f = layer["mixer"], layer["ffn"]
        mixer = Attention(p.mixer.q_heads, m["kv_heads"], p.mixer.head_dim, p.mixer.sliding_window) \
            if m and m["kind"] == "attention" else None
        ffn = MLP(f["width"], p.ffn.gated, p.ffn.activation) if f and f["kind"] == "mlp" else None
        blocks.append(Block(mixer, ffn))
    return parent.with_blocks(tuple(blocks), hidden_size=a["hidden"])


def student_model(arch: Architecture, state_dict: dict, llama_globals: dict) -> torch.nn.Module:
    """The extracted student as our DeciLM model (the class the export ships), fp32, in memory."""
    from autocompress.export import decilm_config_from_architecture
    from autocompress.modeling.configuration_decilm import DeciLMConfig
    from autocompress.modeling.modeling_decilm import DeciLMForCausalLM

    cfg = decilm_config_from_architecture(arch, **llama_globals)
    model = DeciLMForCausalLM(DeciLMConfig(**cfg)).float()
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and cfg.get("tie_word_embeddings"))]
    if missing or unexpected:
        raise RuntimeError(f"student weights do not match the architecture: missing {missing}, unexpected {unexpected}")
    if cfg.get("tie_word_embeddings"):
        model.tie_weights()
    return model


def distill_and_export(arch, permuted, cfg, teacher, train_rows, settings, tokenizer_dir, out: Path, work: Path,
                       upstream_key: str, log, progress: bool) -> dict:
    from safetensors.torch import load_file, save_file

    from autocompress.distill import DistillConfig, distill
    from autocompress.export import export_architecture
    from autocompress.extract import extract

    state, llama_globals = extract(permuted, cfg, arch)
    dcfg = DistillConfig(steps=settings.distill_steps, batch=settings.batch, lr=settings.lr, seed=settings.seed,
                         ckpt_every=max(1, min(20, settings.distill_steps // 3)))

    def distill_stage(tmp: Path, partial: Path) -> dict:
        model = student_model(arch, state, llama_globals)
        log(f"[distill] {settings.distill_steps} steps x {settings.batch} x {settings.seq_len} tokens, lr {settings.lr}")
        if any(partial.iterdir()):
            log(f"[distill] resuming from the last checkpoint in {partial.name}")
        crash = os.environ.get("ACC_CRASH_AT", "")
        if crash.startswith("distill:"):  # fault injection (stages.crash_point): die after checkpoint N
            distill(model, teacher, train_rows, dcfg, ckpt_dir=partial, progress=progress, log=log,
                    stop_after=int(crash.split(":")[1]))
            crash_point(crash)
        res = distill(model, teacher, train_rows, dcfg, ckpt_dir=partial, progress=progress, log=log)
        sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        if llama_globals.get("tie_word_embeddings", arch.tie_embeddings):
            sd.pop("lm_head.weight", None)
        save_file(sd, str(tmp / "student.safetensors"))
        summary = {"steps": res.steps, "tokens": res.tokens, "seconds": round(res.seconds, 1),
                   "first_loss": res.losses[0] if res.losses else None, "last_loss": res.losses[-1] if res.losses else None,
                   "resumed_from": res.resumed_from}
        (tmp / "distill.json").write_text(json.dumps({**summary, "losses": res.losses}, indent=1))
        return summary

    key = stage_key("distill", upstream_key, json.dumps(dcfg.__dict__, default=str))
    st = run_stage(work, "distill", key, distill_stage, log)
    trained = load_file(str(st.path / "student.safetensors"))
    export_architecture(out, arch, trained, tokenizer_dir, overwrite=True, **llama_globals)
    log(f"[export] {out}")
    return {**st.summary, "export": str(out), "format": "llama" if (arch.is_homogeneous() and arch.blocks[0].attention
                                                                     and arch.blocks[0].ffn) else "decilm"}
