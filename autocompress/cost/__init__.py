"""Cost model v1: analytic roofline + efficiency + per-kernel constants, calibrated by profile data.

Public API (pure Python, imports nothing heavy):

* ``predict_workload(arch, target, workload, profile=None, device=None) -> WorkloadCost``
* ``decode_floor(arch, target, workload, device=None) -> float`` (seconds)
* ``memory_breakdown(arch, target, workloads, profile=None, device=None) -> MemoryBreakdown``
* ``block_op_table(arch, block_index, pass_, device, profile, numerics) -> BlockOpTable`` and
  ``op_time(op, device, profile, precision, graph=False) -> float`` for the feasibility stage
* ``workload_plan(target, workload, device, profile, limits)``: the engine steps both use
* ``load_profile(path | None, device, engine) -> Profile`` (``ProfileError`` on a bad file)
"""

from autocompress.cost.latency import (StepCost, WorkloadCost, WorkloadPlan, decode_floor, decode_sum, graph_eligible,
                                       predict_workload, prefill_passes, prefill_tokens, step_cost, workload_plan)
from autocompress.cost.memory import MemoryBreakdown, kv_cache_bytes, memory_breakdown, weight_bytes
from autocompress.cost.profile import Profile, ProfileError, load_profile, validate_profile
from autocompress.cost.roofline import (BlockOpTable, Numerics, Op, OpCoefficients, Pass, Segment, block_op_table,
                                        block_ops, model_ops, op_time)

__all__ = [
    "BlockOpTable", "MemoryBreakdown", "Numerics", "Op", "OpCoefficients", "Pass", "Profile", "ProfileError",
    "Segment", "StepCost", "WorkloadCost", "WorkloadPlan", "block_op_table", "block_ops", "decode_floor", "decode_sum",
    "graph_eligible", "kv_cache_bytes", "load_profile", "memory_breakdown", "model_ops", "op_time",
    "predict_workload", "prefill_passes", "prefill_tokens", "step_cost", "validate_profile", "weight_bytes",
    "workload_plan",
]
