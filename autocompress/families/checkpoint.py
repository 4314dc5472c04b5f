"""Checkpoint plumbing every family shares: read a safetensors folder, map names between a
family's checkpoint and the canonical layout of ``nn.hybrid`` (experts stacked), check shapes.

A family describes its names with one function, ``names(arch, cfg) -> (plain, experts)``:
``plain`` maps canonical name -> checkpoint name for every tensor that is not an expert's, and
``experts`` maps canonical stacked name (``L3.e_up``) -> a checkpoint template with ``{e}``
(``model.layers.3.mlp.experts.{e}.up_proj.weight``). ``to_canonical`` and ``from_canonical`` are
exact inverses of each other (tested), so what loads is what exports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file


def read_folder(folder: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config.json, fp32 tensors of every ``*.safetensors`` file) of a Hugging Face folder."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update({k: v.float() for k, v in load_file(str(f)).items()})
    return config, tensors


def to_canonical(tensors: Mapping[str, torch.Tensor], plain: Mapping[str, str], experts: Mapping[str, str],
                 counts: Mapping[str, int], fused: Mapping[str, tuple[str, int, int]] | None = None
                 ) -> dict[str, torch.Tensor]:
    """Canonical weights from checkpoint tensors. ``counts``: experts per stacked name.
    ``fused``: stacked name -> (checkpoint name of a 3D tensor, start, length along dim 1), used
    when the per-expert tensors are absent (transformers' in-memory layout, e.g. ``gate_up_proj``)."""
    out, missing = {}, []
    for canon, name in plain.items():
        if name in tensors:
            out[canon] = tensors[name]
        else:
            missing.append(name)
    for canon, template in experts.items():
        names = [template.format(e=e) for e in range(counts[canon])]
        if all(n in tensors for n in names):
            out[canon] = torch.stack([tensors[n] for n in names])
        elif fused and canon in fused and fused[canon][0] in tensors:
            name, start, length = fused[canon]
            out[canon] = tensors[name].narrow(1, start, length).contiguous()
        else:
            missing.append(names[0])
    if missing:
        raise ValueError(f"checkpoint lacks {len(missing)} tensors the config implies, e.g. {sorted(missing)[:4]}")
    return out


def from_canonical(state: Mapping[str, torch.Tensor], plain: Mapping[str, str], experts: Mapping[str, str]
                   ) -> dict[str, torch.Tensor]:
    """Checkpoint tensors (per-expert names) from canonical weights; every canonical name must map."""
    out, unknown = {}, sorted(set(state) - set(plain) - set(experts))
    if unknown:
        raise ValueError(f"no checkpoint name for {unknown[:4]}")
    for canon, name in plain.items():
        out[name] = state[canon]
    for canon, template in experts.items():
        for e, t in enumerate(state[canon].unbind(0)):
            out[template.format(e=e)] = t
    return {k: v.detach().contiguous() for k, v in out.items()}


def check_shapes(state: Mapping[str, torch.Tensor], want: Mapping[str, tuple[int, ...]]) -> None:
    """The canonical weights are exactly the tensors the architecture implies (names and shapes)."""
    missing, extra = sorted(set(want) - set(state)), sorted(set(state) - set(want))
    wrong = sorted(f"{k}: expected {want[k]}, got {tuple(state[k].shape)}" for k in set(want) & set(state)
                   if tuple(state[k].shape) != tuple(want[k]))
    if missing or extra or wrong:
        lines = [f"missing {missing[:6]}"] * bool(missing) + [f"unexpected {extra[:6]}"] * bool(extra) + wrong[:6]
        raise ValueError("weights do not match the architecture:\n  " + "\n  ".join(lines))
