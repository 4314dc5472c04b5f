"""Derived settings: everything the spec does not state, computed in one place and explained.

The spec states goals; this module turns them into engine settings, the search space and the
cost-model profile, each with the formula or source that produced it. The build log and the
reports print ``Derived.rows`` verbatim, so a reviewer sees why, not only what.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from autocompress.catalog.engines import ENGINES, SchedulerLimits, scheduler_defaults
from autocompress.catalog.hardware import resolve_device
from autocompress.cost.profile import Profile, load_profile, origin
from autocompress.ir import Architecture
from autocompress.plan.budget import Budget
from autocompress.plan.space import SearchSpace, derive_space


@dataclass(frozen=True)
class Derived:
    device: object  # catalog.hardware.Device
    profile: Profile
    limits: SchedulerLimits
    space: SearchSpace
    rows: tuple[tuple[str, str, str], ...]  # (setting, value, why)
    origin: tuple[str, str]  # cost.profile.origin for this parent: where the numbers come from
    budget: Budget  # the contract's bounds, resolved (``plan.budget``)


def engine_limits(spec, device) -> SchedulerLimits:
    """The serving settings we recommend (and predict with).

    vLLM sizes its profile run and CUDA graphs from max_num_seqs: its default (256 or 1024) makes a
    small model's sampler logits alone take hundreds of MiB. The contract names its concurrency, so
    we serve with max_num_seqs = the largest concurrency (the export's serving recipe says so) and
    keep vLLM's default token budget per step.
    """
    base = scheduler_defaults(spec.target.engine, device, server=any(w.mode == "serve" for w in spec.workloads))
    seqs = max(w.concurrency for w in spec.workloads)
    return SchedulerLimits(base.max_num_batched_tokens, max(1, min(seqs, max(base.max_num_seqs, seqs))))


def derive(spec, parent: Architecture, base_dir: str = ".") -> Derived:
    t = spec.target
    device = resolve_device(t.hardware)
    profile_path = None
    if t.profile:
        profile_path = t.profile if os.path.isabs(t.profile) else os.path.join(base_dir, t.profile)
    profile = load_profile(profile_path, device, t.engine, parent)
    where = origin(profile, device, parent)
    limits = engine_limits(spec, device)
    axes = spec.search.axes if spec.search and spec.search.axes else None
    space = derive_space(parent, t.engine, device.kind, axes)
    rows = [
        ("device", device.name, device.source),
        ("cost-model profile", profile.name, where[1]),
    ]
    rows.append(margin_row(profile))
    if t.engine == "vllm":
        rows.append(("max_num_seqs", str(limits.max_num_seqs), "the contract's largest concurrency (vLLM's default "
                     "would size the profile run and CUDA graphs for hundreds of sequences)"))
        rows.append(("max_num_batched_tokens", str(limits.max_num_batched_tokens),
                     "vLLM's default for this device class"))
        if ENGINES[t.engine].cuda_graphs and device.kind == "gpu":
            rows.append(("CUDA graphs", "on", "vLLM V1 default (FULL_AND_PIECEWISE)"))
    rows += list(space.derivation)
    return Derived(device, profile, limits, space, tuple(rows), where, Budget.of(spec))


def margin_row(profile) -> tuple[str, str, str]:
    """The memory safety margin the exact model adds, and where it comes from (calibrate.margin)."""
    m, b = profile.memory, profile.margin_basis
    value = f"{m.margin_fraction:.1%} of non-KV memory + {m.margin_bytes / 2**20:.0f} MiB"
    if not b:
        return ("memory safety margin", value, "the profile's fixed allowance, not derived from a calibration")
    parts = []
    if "heldout" in b:
        parts.append(f"fraction: max(p95 under-prediction {b['p95_under_prediction']:.1%}, median |error| "
                     f"{b['median_abs_error']:.1%}) of memory on {b['heldout']} held-out architectures"
                     + (f" and {b['leave_one_out']} calibration models left out of the memory fit one at a time"
                        if b.get("leave_one_out") else ""))
    if "reference_runs" in b:
        parts.append(f"bytes: 2 x SD of the parent's peak RSS over {b['reference_runs']} runs "
                     f"({b['reference_rss_sd_bytes'] / 2**20:.0f} MiB)")
    return ("memory safety margin", value, "derived by the profile's calibration: " + "; ".join(parts)
            + f" (each at most the default {b['default_fraction']:.0%} + {b['default_bytes'] / 2**20:.0f} MiB)")
