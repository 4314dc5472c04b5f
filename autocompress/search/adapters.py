"""Low-rank adapters: the supernet's temporary weights while router v2 searches.

The paper trains the supernet's weights during the search so that the router sees which layers
recover with training; the final model is then extracted from the *parent's* weights and
distilled (``extract``), so these weights are temporaries. We train low-rank adapters (LoRA, Hu et
al. 2021) on every per-layer projection matrix instead of the full weights:

    W_eff = W + (alpha / r) * B @ A,   A: (r, in) ~ N(0, 1/in),   B: (out, r) = 0

B starts at zero, so at step 0 the supernet is exactly the parent. Why adapters, not full
temporaries: their state (weights and Adam moments) is ~r/d of
the parent's (SmolLM2 at r 8: 2.2M numbers against 3 x 135M for full weights with Adam), so the
search checkpoint that makes it resumable is megabytes, and a 70B parent's search does not need
three extra copies of the parent in memory. What they cost: the merged matrix is formed each step
(``merged``) and autograd forms the full-size dL/dW_eff before projecting it onto A and B, so the
step's compute is about that of full temporaries; a factored forward (x A^T B^T beside x W^T) would
save that GEMM and is not done.

Pure tensor math: which weights get adapters, the merged weights, the state as named tensors.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch


def adapted_names(params: Mapping[str, torch.Tensor], rank: int) -> tuple[str, ...]:
    """The per-layer projection matrices: 2-D, both sides wider than the rank; embeddings, the LM
    head and norms are shared by every candidate and stay the parent's."""
    skip = ("embed", "lm_head", "norm")
    return tuple(sorted(k for k, v in params.items()
                        if v.ndim == 2 and min(v.shape) > rank and not any(s in k for s in skip)))


class Adapters:
    """``Adapters(params, rank, seed)``: one (A, B) pair per adapted matrix; ``merged(params)``."""

    def __init__(self, params: Mapping[str, torch.Tensor], rank: int = 8, alpha: float = 16.0, seed: int = 0):
        self.rank, self.scale = rank, (alpha / rank if rank > 0 else 0.0)
        self.names = adapted_names(params, rank) if rank > 0 else ()
        g = torch.Generator().manual_seed(seed)
        self.a: dict[str, torch.nn.Parameter] = {}
        self.b: dict[str, torch.nn.Parameter] = {}
        for k in self.names:
            out_f, in_f = params[k].shape
            self.a[k] = torch.nn.Parameter(torch.randn(rank, in_f, generator=g) / in_f ** 0.5)
            self.b[k] = torch.nn.Parameter(torch.zeros(out_f, rank))

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for k in self.names for p in (self.a[k], self.b[k])]

    def delta(self, name: str) -> torch.Tensor:
        return self.scale * (self.b[name] @ self.a[name])

    def merged(self, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The parent's weights with every adapter added (differentiable in the adapters)."""
        out = dict(params)
        for k in self.names:
            out[k] = params[k] + self.delta(k)
        return out

    def state(self) -> dict[str, torch.Tensor]:
        """Named tensors for a safetensors checkpoint."""
        return {**{f"a.{k}": v.detach().clone() for k, v in self.a.items()},
                **{f"b.{k}": v.detach().clone() for k, v in self.b.items()}}

    def load_state(self, tensors: Mapping[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for k in self.names:
                self.a[k].copy_(tensors[f"a.{k}"])
                self.b[k].copy_(tensors[f"b.{k}"])


def optimizer_state(opt: torch.optim.Optimizer, prefix: str) -> dict[str, torch.Tensor]:
    """An optimizer's per-parameter state as named tensors (no pickle): ``{prefix}.{i}.{field}``."""
    out = {}
    for i, st in opt.state_dict()["state"].items():
        for f, v in st.items():
            out[f"{prefix}.{i}.{f}"] = (v if torch.is_tensor(v) else torch.tensor(v)).detach().clone()
    return out


def load_optimizer_state(opt: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor], prefix: str) -> None:
    """The inverse of ``optimizer_state``: the groups come from ``opt`` itself (its config)."""
    sd = opt.state_dict()
    state: dict[int, dict] = {}
    for name, v in tensors.items():
        if name.startswith(prefix + "."):
            i, f = name[len(prefix) + 1:].split(".", 1)
            state.setdefault(int(i), {})[f] = v.clone()
    opt.load_state_dict({"state": state, "param_groups": sd["param_groups"]})


__all__ = ["Adapters", "adapted_names", "load_optimizer_state", "optimizer_state"]
