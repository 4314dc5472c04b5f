"""The distillation recipe: schedule, data order, KD steps, checkpoints and bit-identical resume."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

import _distillkit as kit  # noqa: E402

from autocompress.train.distill import DistillConfig, HiddenPairs, batch_rows, distill, lr_at
from autocompress.data.teacher import cache_teacher


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    teacher = kit.tiny_llama(0)
    tokens = kit.random_tokens(10, 16, seed=3)
    cache = cache_teacher(teacher, tokens, "tiny-0", k=16, batch=5, chunk_rows=5, cache_dir=tmp_path_factory.mktemp("teacher"))
    return teacher, tokens, cache


def _student(teacher):
    student = copy.deepcopy(teacher)
    with torch.no_grad():
        g = torch.Generator().manual_seed(7)
        for p in student.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return student


def test_schedule_warmup_then_cosine():
    cfg = DistillConfig(steps=100, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(1e-4) and lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(10, cfg) == pytest.approx(1e-3)
    assert lr_at(55, cfg) == pytest.approx(1e-4 + 0.9e-3 * 0.5)  # half way down the cosine
    assert lr_at(100, cfg) == pytest.approx(1e-4)
    assert DistillConfig(steps=100).warmup == 5 and DistillConfig(steps=3).warmup == 1


def test_data_order_visits_every_row_each_epoch():
    cfg = DistillConfig(steps=10, batch=3, grad_accum=2, seed=5)
    seen = torch.cat([batch_rows(s, m, cfg, 12) for s in range(4) for m in range(2)])  # 24 = 2 epochs
    assert sorted(seen[:12].tolist()) == list(range(12)) == sorted(seen[12:].tolist())
    assert seen[:12].tolist() != seen[12:].tolist()  # a fresh permutation per epoch
    assert torch.equal(batch_rows(3, 1, cfg, 12), batch_rows(3, 1, cfg, 12))


def test_kd_lowers_the_loss_and_reports_progress_only_to_its_sink(setup, capsys):
    from autocompress.progress import LineSink, Progress

    teacher, tokens, cache = setup
    student = _student(teacher)
    lines = []
    res = distill(student, cache, tokens, DistillConfig(steps=12, batch=2, lr=3e-3, seed=0),
                  progress=Progress(LineSink(lines.append, every_s=0.0)))
    assert res.steps == 12 and res.tokens == 12 * 2 * 16 and len(res.losses) == 12
    assert sum(res.losses[-3:]) < 0.7 * sum(res.losses[:3])
    assert capsys.readouterr() == ("", "")  # a stage never prints: only its progress sink sees anything
    # one line per step (every_s=0), the last one from the task's end, with its duration
    assert len(lines) == 12 and lines[0].startswith("[distill] 1/12 step") and "ETA" in lines[0]
    assert lines[-1].startswith("[distill] 12/12 step") and " in " in lines[-1] and "loss" in lines[-1]


def test_resume_after_crash_is_bit_identical(setup, tmp_path):
    teacher, tokens, cache = setup
    torch.use_deterministic_algorithms(True)
    try:
        cfg = DistillConfig(steps=6, batch=2, grad_accum=2, lr=2e-3, ckpt_every=1, seed=11)
        straight = _student(teacher)
        full = distill(straight, cache, tokens, cfg, ckpt_dir=tmp_path / "a")

        crashed = _student(teacher)
        part = distill(crashed, cache, tokens, cfg, ckpt_dir=tmp_path / "b", stop_after=3)
        assert part.steps == 3
        torch.manual_seed(999)  # whatever happened in between must not matter
        resumed_model = _student(teacher)  # a fresh process: weights come from the checkpoint
        resumed = distill(resumed_model, cache, tokens, cfg, ckpt_dir=tmp_path / "b")
    finally:
        torch.use_deterministic_algorithms(False)
    assert resumed.resumed_from == 3 and resumed.steps == 6
    assert resumed.losses == full.losses and resumed.lrs == full.lrs
    assert kit.state_hash(resumed_model) == kit.state_hash(straight)
    assert kit.state_hash(straight) != kit.state_hash(_student(teacher))


def test_checkpoint_layout_has_no_pickle(setup, tmp_path):
    teacher, tokens, cache = setup
    cfg = DistillConfig(steps=5, batch=2, ckpt_every=2, keep_ckpts=2)
    distill(_student(teacher), cache, tokens, cfg, ckpt_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004", "step-00000005"]
    files = sorted(p.name for p in (tmp_path / "step-00000005").iterdir())
    assert files == ["model.safetensors", "optimizer.safetensors", "rng.safetensors", "state.json"]
    # a finished run resumes into a no-op
    again = distill(_student(teacher), cache, tokens, cfg, ckpt_dir=tmp_path)
    assert again.resumed_from == 5 and again.steps == 5 and len(again.losses) == 5


def test_hidden_state_pairs(setup):
    teacher, tokens, cache = setup
    student = _student(teacher)
    pairs = [(student.model.layers[i], teacher.model.layers[i]) for i in range(2)]
    cfg = DistillConfig(steps=2, batch=2, hidden_weight=1.0)
    with_h = distill(student, cache, tokens, cfg, hidden=HiddenPairs(teacher, pairs))
    without = distill(_student(teacher), cache, tokens, cfg)
    assert with_h.losses[0] > without.losses[0]  # the MSE term is added
    # hooks are removed afterwards
    assert not student.model.layers[0]._forward_hooks and not teacher.model.layers[0]._forward_hooks


def test_decilm_student(setup):
    """A heterogeneous DeciLM student (our export's modeling code) distils from a Llama teacher."""
    _, tokens, cache = setup
    student = kit.tiny_decilm(0)
    res = distill(student, cache, tokens, DistillConfig(steps=8, batch=2, lr=3e-3))
    assert sum(res.losses[-2:]) < sum(res.losses[:2])


def test_resume_refuses_another_config(setup, tmp_path):
    teacher, tokens, cache = setup
    distill(_student(teacher), cache, tokens, DistillConfig(steps=2, batch=2, ckpt_every=1), ckpt_dir=tmp_path)
    with pytest.raises(ValueError, match=r"different configuration \(lr: checkpoint 0.0003, now 0.001\)"):
        distill(_student(teacher), cache, tokens, DistillConfig(steps=2, batch=2, lr=1e-3), ckpt_dir=tmp_path)
    # checkpoint cadence may change
    distill(_student(teacher), cache, tokens, DistillConfig(steps=2, batch=2, ckpt_every=5), ckpt_dir=tmp_path)
