"""What the feasibility objective maximizes: the parent's importance kept by an architecture.

Two sources, one shape: per layer an attention weight alpha_l and an FFN weight beta_l, and
concave "kept importance" curves over the share of KV heads, FFN channels and hidden channels
kept (the cumulative sum of importances sorted in decreasing order, so keeping a prefix keeps the
most important channels first).

* **prior** (no importance file): every sub-block equally important, the first and last layers
  doubled (``prior_importance``), and the curve phi(x) = 1 - (1 - x)^2: diminishing returns, the
  typical shape of sorted activation-magnitude importance (Minitron's channel statistics).
* **file** (written by ``acc build``'s importance stage, or by hand): measured curves and layer
  scores, JSON ``{"version": 1, "layers": [{"attention": s, "ffn": s, "kv_curve": [...],
  "ffn_curve": [...]}], "hidden_curve": [...]}``; curves are cumulative shares at evenly spaced
  keep fractions from 0 to 1 (first 0, last 1). Hybrid and MoE parents add per layer
  ``mamba_curve`` (Mamba2 heads) and ``width_curve`` (expert width), the global sizes' curves; a MoE
  layer's ``ffn_curve`` is over its experts.

Curves enter the LP as piecewise-linear hypographs (concave, so maximizing is an LP; ``relax``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import numpy as np

from autocompress.diagnostics import ImportanceFileError
from autocompress.ir import MLP, Architecture, Attention, Mamba2, MoE

SEGMENTS = 8  # pieces of each piecewise-linear curve


def _prior_curve(n: int = SEGMENTS) -> tuple[float, ...]:
    xs = np.linspace(0.0, 1.0, n + 1)
    return tuple(float(v) for v in 1.0 - (1.0 - xs) ** 2)


def _interp(curve: tuple[float, ...], frac: float) -> float:
    xs = np.linspace(0.0, 1.0, len(curve))
    return float(np.interp(min(max(frac, 0.0), 1.0), xs, curve))


@dataclass(frozen=True)
class Importance:
    source: str  # "prior" | path of the importance file
    alpha: tuple[float, ...]  # per layer: weight of the attention sub-block
    beta: tuple[float, ...]  # per layer: weight of the FFN sub-block
    kv_curves: tuple[tuple[float, ...], ...]
    ffn_curves: tuple[tuple[float, ...], ...]  # MoE layers: over the expert count
    hidden_curve: tuple[float, ...]
    # the global sizes (``feasibility.variants``): Mamba2 heads and expert width, per layer; () = the prior
    mamba_curves: tuple[tuple[float, ...], ...] = ()
    width_curves: tuple[tuple[float, ...], ...] = ()

    # ---- numeric score (rounding, repair, reports) -------------------------------------------
    def score(self, arch: Architecture, parent: Architecture) -> float:
        """Importance kept, 0..1 (1 for the parent itself)."""
        total = 0.0
        for l, (b, p) in enumerate(zip(arch.blocks, parent.blocks)):
            if isinstance(b.mixer, Attention) and isinstance(p.mixer, Attention):
                total += self.alpha[l] * 0.5 * (1 + _interp(self.kv_curves[l], b.mixer.kv_heads / p.mixer.kv_heads))
            elif isinstance(b.mixer, Mamba2) and isinstance(p.mixer, Mamba2):
                total += self.alpha[l] * self.global_factor(l, "mamba", b.mixer.heads / p.mixer.heads)
            elif b.mixer is not None and p.mixer is not None:
                total += self.alpha[l]
            if isinstance(b.ffn, MLP) and isinstance(p.ffn, MLP):
                total += self.beta[l] * _interp(self.ffn_curves[l], b.ffn.width / p.ffn.width)
            elif isinstance(b.ffn, MoE) and isinstance(p.ffn, MoE):
                total += (self.beta[l] * _interp(self.ffn_curves[l], b.ffn.experts / p.ffn.experts)
                          * self.global_factor(l, "width", b.ffn.expert_width / p.ffn.expert_width))
        return self.hidden_factor(arch.hidden_size, parent.hidden_size) * total

    def global_factor(self, layer: int, kind: str, frac: float) -> float:
        """Share of layer ``layer``'s importance kept at a fraction of its Mamba2 heads (``mamba``) or
        of its expert width (``width``); exactly 1 at the full size, whatever the curve."""
        if frac >= 1.0:
            return 1.0
        curves = self.mamba_curves if kind == "mamba" else self.width_curves
        return _interp(curves[layer] if curves else _prior_curve(), frac)

    def for_variant(self, parent: Architecture, variant: Architecture) -> "Importance":
        """The same objective for a parent whose global sizes are ``variant``'s (fewer Mamba2 heads, a
        narrower expert width): each layer's weight carries its global factor, so scoring an
        architecture against the variant gives its score against ``parent`` (``feasibility.variants``)."""
        alpha, beta = list(self.alpha), list(self.beta)
        for l, (v, p) in enumerate(zip(variant.blocks, parent.blocks)):
            if isinstance(v.mixer, Mamba2) and isinstance(p.mixer, Mamba2):
                alpha[l] *= self.global_factor(l, "mamba", v.mixer.heads / p.mixer.heads)
            if isinstance(v.ffn, MoE) and isinstance(p.ffn, MoE):
                beta[l] *= self.global_factor(l, "width", v.ffn.expert_width / p.ffn.expert_width)
        return replace(self, alpha=tuple(alpha), beta=tuple(beta))

    def hidden_factor(self, d: int, d_parent: int) -> float:
        return _interp(self.hidden_curve, d / d_parent)

    def _tables(self, parent: Architecture) -> dict:
        """Per-layer arrays of the score: weights, the parent's sizes, curves (rows = layers)."""
        return {
            "alpha": np.array(self.alpha), "beta": np.array(self.beta),
            "kv_at": np.array([b.mixer.kv_heads if isinstance(b.mixer, Attention) else 1 for b in parent.blocks], float),
            "w_at": np.array([b.ffn.width if isinstance(b.ffn, MLP) else b.ffn.experts if isinstance(b.ffn, MoE) else 1
                              for b in parent.blocks], float),
            "is_att": np.array([isinstance(b.mixer, Attention) for b in parent.blocks]),
            "kv_c": np.array(self.kv_curves, float), "ffn_c": np.array(self.ffn_curves, float),
        }

    def scorer(self, parent: Architecture):
        """A fast ``score`` over the LP's x vectors (a, k, g, w per layer), for the repair loops."""
        L = parent.num_layers
        t = self._tables(parent)
        cols = np.arange(L)[None, :]

        def score_x(x: np.ndarray, factor: float):
            """Scores of one point (4L,) -> float, or of many (n, 4L) -> array."""
            X = np.atleast_2d(x)
            a, k, g, w = X[:, :L], X[:, L:2 * L], X[:, 2 * L:3 * L], X[:, 3 * L:]
            attn = np.where(t["is_att"], 0.5 * (a + a * _interp_rows(t["kv_c"], cols, k / t["kv_at"])), a)
            ffn = g * _interp_rows(t["ffn_c"], cols, w / t["w_at"])
            out = factor * (attn @ t["alpha"] + ffn @ t["beta"])
            return float(out[0]) if x.ndim == 1 else out

        return score_x

    def layer_scorer(self, parent: Architecture):
        """The same score, one layer at a time: ``part(layers, Y)`` is what layer ``layers[i]``
        contributes with sizes ``Y[i]`` = (a, k, g, w), before the hidden factor. The score of a
        point is the sum of its layers' parts, so a move within one layer changes it by the
        difference of that layer's parts (the repair loops' moves)."""
        t = self._tables(parent)

        def part(layers: np.ndarray, Y: np.ndarray) -> np.ndarray:
            a, k, g, w = Y.T
            kv = _interp_rows(t["kv_c"], layers, k / t["kv_at"][layers])
            attn = np.where(t["is_att"][layers], 0.5 * (a + a * kv), a)
            ffn = g * _interp_rows(t["ffn_c"], layers, w / t["w_at"][layers])
            return attn * t["alpha"][layers] + ffn * t["beta"][layers]

        return part


def _interp_rows(curves: np.ndarray, rows, frac: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation of curve ``rows`` (evenly spaced on [0, 1]) at ``frac``,
    elementwise (``rows`` broadcasts against ``frac``)."""
    n = curves.shape[1]
    pos = np.clip(frac, 0.0, 1.0) * (n - 1)
    i = np.minimum(pos.astype(int), n - 2)
    t = pos - i
    return curves[rows, i] * (1 - t) + curves[rows, i + 1] * t


def prior_importance(parent: Architecture) -> Importance:
    """Equal weight for every attention and FFN sub-block, the first and last layers doubled.

    Without measurements we assume no layer matters more than another, except the first and the
    last: ShortGPT's block influence and Minitron's depth importance both rank them highest. A
    parameter-proportional prior was tried first and rejected: it valued an attention sub-block at
    a quarter of an FFN (SmolLM2) and the LP removed every attention layer but one (docs/cost-model.md).
    """
    L = parent.num_layers
    w = [2.0 if l in (0, L - 1) else 1.0 for l in range(L)]
    attn = [w[l] if b.mixer is not None else 0.0 for l, b in enumerate(parent.blocks)]
    ffn = [w[l] if b.ffn is not None else 0.0 for l, b in enumerate(parent.blocks)]
    total = float(sum(attn) + sum(ffn)) or 1.0
    c = _prior_curve()
    return Importance("prior", tuple(a / total for a in attn), tuple(f / total for f in ffn),
                      (c,) * L, (c,) * L, c)


def load_importance(path: str, parent: Architecture) -> Importance:
    """The importance file at ``path`` (format: module docstring); ``ImportanceFileError`` when it
    cannot be read or does not fit ``parent``."""
    try:
        data = json.loads(open(path, encoding="utf-8").read())
        layers = data["layers"]
        if len(layers) != parent.num_layers:
            raise ImportanceFileError(f"{path}: {len(layers)} layers, the parent has {parent.num_layers}")
        alpha = np.array([float(x.get("attention", 0.0)) for x in layers])
        beta = np.array([float(x.get("ffn", 0.0)) for x in layers])
        c = _prior_curve()
        kv = tuple(tuple(float(v) for v in x.get("kv_curve", c)) for x in layers)
        ffn = tuple(tuple(float(v) for v in x.get("ffn_curve", c)) for x in layers)
        hidden = tuple(float(v) for v in data.get("hidden_curve", c))
        mamba = tuple(tuple(float(v) for v in x.get("mamba_curve", c)) for x in layers)
        width = tuple(tuple(float(v) for v in x.get("width_curve", c)) for x in layers)
    except ImportanceFileError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ImportanceFileError(f"{path}: not an importance file ({type(e).__name__}: {e})") from None
    total = float(alpha.sum() + beta.sum()) or 1.0
    return Importance(path, tuple(alpha / total), tuple(beta / total), kv, ffn, hidden, mamba, width)
