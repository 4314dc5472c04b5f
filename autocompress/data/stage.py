"""The data stage of ``acc build``: the spec's corpus (or the default mixture) as token rows.

    corpus (corpus.load_corpus) -> tokens (tokens.mixed_dataset / token_dataset, cached)
        -> calibration rows, teacher/training rows, held-out rows per kind

The rows are drawn with the build's seed, so every strategy of one build (autocompress, the
uniform baseline) and every later stage sees the same data. ``BuildData.key`` identifies it: the
corpus digest, the tokenizer, the sequence length, the seed and the code of this stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from autocompress.cache import code_digest, key
from autocompress.data.corpus import load_corpus
from autocompress.data.tokens import mixed_dataset, token_dataset, tokenizer_digest

# The default mixture is ~96% code by tokens: draw code and prose equally so prose quality is
# distilled too (a user corpus of one kind simply uses that kind).
MIXTURE = {"code": 0.5, "prose": 0.5}


@dataclass(frozen=True)
class BuildData:
    calibration: torch.Tensor  # [n, seq + 1] importance statistics
    train: torch.Tensor  # [n, seq + 1] teacher outputs, search, distillation
    heldout: dict[str, torch.Tensor]  # kind -> [n, seq + 1], never trained on
    description: str
    documents: int
    key: str


def prepare_data(spec, tokenizer_dir: Path, settings, base_dir: str, progress=None) -> BuildData:
    """``progress``: where tokenization (the slow part, once per corpus and tokenizer) reports."""
    corpus = load_corpus(spec.distill.data if spec.distill and spec.distill.data else None, base_dir)
    train = mixed_dataset(corpus, tokenizer_dir, settings.seq_len, MIXTURE, "train", skip_missing=True,
                          progress=progress)
    heldout = {kind: token_dataset(corpus, tokenizer_dir, settings.seq_len, "heldout", kind)[: settings.eval_rows]
               for kind in ("code", "prose")}
    heldout = {k: v for k, v in heldout.items() if len(v)}
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(settings.seed))
    k = key("data", corpus.digest, tokenizer_digest(tokenizer_dir), str(settings.seq_len), str(settings.seed),
            code_digest("autocompress.data.stage", "autocompress.data.tokens", "autocompress.data.corpus"))
    return BuildData(train[order[: settings.calib_rows]], train[order[: settings.teacher_rows]], heldout,
                     corpus.description, len(corpus.docs), k)
