"""Derived build settings: budgets, schedules and data sizes, each with its reason.

The spec states goals; anything it leaves out is computed here, in one place, and printed in the
build log and the build report (style: derive, don't configure, and show the derivation).
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class BuildSettings:
    strategy: str
    seed: int
    seq_len: int
    batch: int
    distill_steps: int
    lr: float
    search_batch: int
    search_seq: int
    search_tokens: int
    search_temperature: float
    finalists: int
    finalist_steps: int
    runoff_margin: float
    runoff_steps: int
    calib_rows: int
    ablation_rows: int
    teacher_rows: int
    eval_rows: int
    topk: int
    rows: tuple[tuple[str, str, str], ...]  # (setting, value, why)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "rows"}


def derive_build(spec) -> BuildSettings:
    """Build settings; builds run on this host's CPUs in fp32 whatever the target hardware."""
    s, d, e = spec.search, spec.distill, spec.evaluate
    rows = []

    def pick(name, given, default, why):
        value = given if given is not None else default
        rows.append((name, str(value), "from the spec" if given is not None else why))
        return value

    strategy = pick("strategy", s.strategy if s else None, "autocompress", "the default: heterogeneous search")
    seed = pick("seed", s.seed if s else None, 0, "fixed, so builds are reproducible")
    seq_len = pick("seq_len", d.seq_len if d else None, 256,
                   "a SmolLM2-size train step of 4 x 512 tokens takes ~34 s on these CPUs; 256 halves it")
    batch = pick("batch", d.batch if d else None, 4, "4 sequences per step keeps a step under ~10 s on 2 cores")
    # ~60 steps x 4 x 256 = 61K tokens: a CPU-sized recovery (Minitron advises 80-100B tokens on GPUs;
    # the report states the budget so nobody mistakes this for a full recovery)
    steps = pick("distill steps", d.steps if d else None, 60,
                 "fits the 30-minute CPU build budget with search and evaluation")
    lr = pick("lr", d.lr if d else None, 3e-4, "AdamW, warm-up 5% then cosine to 10% (Minitron recovery range)")
    search_batch = pick("search batch", None, 2, "the router needs a quality signal, not a recovery: small batches")
    search_seq = pick("search tokens per sequence", None, min(seq_len, 64),
                      "the masked supernet's forward+backward costs ~3 plain forwards; 64 tokens keep a step ~2 s")
    # router v2's budget in tokens (the spec's ``steps N``: N steps of search batch x search tokens): a
    # quarter of what distillation reads, so the search costs about as much as a quarter of the
    # recovery (a search step runs the masked supernet forward and backward, like a distillation step
    # on fewer tokens); at least 64 steps, so an annealed temperature and a 2-nat prior at lr 0.1
    # have room to move the decode
    per_step = search_batch * search_seq
    given = (s.tokens if s and s.tokens else None) or (s.steps * per_step if s and s.steps else None)
    search_tokens = pick("router v2 tokens", given,
                         max(64 * per_step, steps * batch * seq_len // 4 // per_step * per_step),
                         f"a quarter of the distillation's {steps * batch * seq_len} tokens, at least 64 steps of "
                         f"{search_batch} x {search_seq}")
    temperature = pick("router v2 temperature", s.temperature if s else None, 1.0,
                       "Gumbel-softmax start, annealed geometrically to 1/20 of it over the steps")
    # the final choice (build/shortlist.py): KL before distillation picked the best model after 20
    # distillation steps (held-out code KL) on none of the 4 contracts measured, so the least-KL
    # candidates are distilled briefly and compared after, as Minitron does
    finalists = pick("finalists", s.finalists if s else None, 4,
                     "the candidates of least KL before distillation, each distilled briefly; the least KL after "
                     "wins (Minitron's practice: KL before distillation is a weak predictor of quality after)")
    finalist_steps = pick("finalist steps", None, max(5, steps // finalists) if finalists > 1 else 0,
                          f"the {finalists} finalists together cost about one distillation ({steps} steps), at "
                          "least 5 steps each" if finalists > 1 else "one finalist: nothing to compare")
    # a near-tie after the short distillations is distilled again, twice as long (build/runoff.py):
    # on code-5070 seed 1 a 0.2% lead after 15 steps was a 2.8% deficit after 30 and 5.6% after 60
    runoff_margin = pick("runoff margin", None, 0.02 if finalists > 1 else 0.0,
                         "finalists this close after the short distillation are re-distilled for the runoff; the "
                         "two measured near-ties (0.2%, 1.0%) fall within it" if finalists > 1 else "no shortlist")
    runoff_steps = pick("runoff steps", None, 2 * finalist_steps,
                        "twice the shortlist's: the two entrants together cost one distillation at the defaults"
                        if finalists > 1 else "no shortlist")
    calib = pick("calibration sequences", None, 32,
                 "activation statistics settle within a few dozen sequences at this size (Minitron uses 1024 on GPUs)")
    ablation = pick("removal-KL sequences", None, 8,
                    "one forward per sub-block (61 on SmolLM2) per batch of these: ~1 min on 2 cores")
    teacher = pick("teacher rows", None, min(256, steps * batch),
                   "distillation cycles over these rows; the parent runs once per row (top-k cached)")
    eval_tokens = e.tokens if e and e.tokens else None
    eval_rows = pick("held-out rows per kind", (eval_tokens // seq_len) if eval_tokens else None, 24,
                     "~6K tokens each of code and prose: perplexity within a few percent at this size")
    topk = pick("teacher top-k", None, 32, "covers >95% of SmolLM2's next-token mass on code; the tail is one bucket")
    return BuildSettings(strategy, seed, seq_len, batch, steps, lr, search_batch, search_seq, search_tokens,
                         temperature, finalists, finalist_steps, runoff_margin, runoff_steps, calib, ablation,
                         teacher, eval_rows, topk, tuple(rows))
