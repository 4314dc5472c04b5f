"""The data stage of ``acc build``: the spec's corpus (or the default mixture) as token rows.

    corpus (corpus.load_corpus) -> tokens (tokens.mixed_dataset / token_dataset, cached)
        -> calibration rows, teacher/training rows, held-out rows per set

The held-out sets, each with its description (``corpus.HeldoutSource``, carried as
``BuildData.heldout_sets`` to the evaluation and the report): the corpus's own held-out split per
kind (``corpus.in_domain_sources``: in the distillation's domain), and the out-of-domain sets of
``corpus.OUT_OF_DOMAIN`` (``corpus.ood_documents``: sources it never reads), and the spec's
``evaluate { data }`` per kind (``corpus.evaluate_documents``: "code-eval", "prose-eval", its
documents the distillation does not read); ``eval_rows`` rows each, the first of the set's
documents in digest order.

The rows are drawn with the build's seed, so every strategy of one build (autocompress, the
uniform baseline) and every later stage sees the same data. ``BuildData.key`` identifies it: the
corpus digest, the tokenizer, the sequence length, the seed and the code of this stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from autocompress.cache import code_digest, key
from autocompress.data.corpus import (OUT_OF_DOMAIN, HeldoutSource, evaluate_documents, in_domain_sources,
                                      load_corpus, missing_ood, ood_documents)
from autocompress.data.tokens import mixed_dataset, pack, token_dataset, token_stream, tokenizer_digest

# The default mixture is ~96% code by tokens: draw code and prose equally so prose quality is
# distilled too (a user corpus of one kind simply uses that kind).
MIXTURE = {"code": 0.5, "prose": 0.5}


@dataclass(frozen=True)
class BuildData:
    calibration: torch.Tensor  # [n, seq + 1] importance statistics
    train: torch.Tensor  # [n, seq + 1] teacher outputs, search, distillation
    heldout: dict[str, torch.Tensor]  # set name -> [n, seq + 1], never trained on
    description: str
    documents: int
    key: str
    heldout_sets: tuple[HeldoutSource, ...] = ()  # what each held-out set is, in ``heldout``'s order
    heldout_missing: tuple[str, ...] = ()  # held-out sets not measured, and why


def prepare_data(spec, tokenizer_dir: Path, settings, base_dir: str, progress=None) -> BuildData:
    """``progress``: where tokenization (the slow part, once per corpus and tokenizer) reports."""
    spec_data = spec.distill.data if spec.distill and spec.distill.data else None
    corpus = load_corpus(spec_data, base_dir)
    train = mixed_dataset(corpus, tokenizer_dir, settings.seq_len, MIXTURE, "train", skip_missing=True,
                          progress=progress)
    rows = settings.eval_rows
    sets = {s.name: (s, token_dataset(corpus, tokenizer_dir, settings.seq_len, "heldout", s.kind)[:rows])
            for s in in_domain_sources(spec_data, corpus)}
    seen = frozenset(d.digest for d in corpus.docs)  # a document the distillation reads is never out of its domain
    ood_digests = []
    for ood in OUT_OF_DOMAIN:
        found = ood_documents(ood, seen)
        if found is None:
            continue
        source, docs = found
        ts = token_stream(docs, tokenizer_dir)
        sets[source.name] = (source, pack(ts.select(None, None), settings.seq_len, bos=ts.bos)[:rows])
        ood_digests.append(docs.digest)
    eval_data = spec.evaluate.data if spec.evaluate and spec.evaluate.data else None
    if eval_data is not None:  # the deployment's own text: scored, never trained on
        for source, docs in evaluate_documents(load_corpus(eval_data, base_dir), seen):
            ts = token_stream(docs, tokenizer_dir)
            sets[source.name] = (source, pack(ts.select(None, None), settings.seq_len, bos=ts.bos)[:rows])
            ood_digests.append(docs.digest)
    # a kind the corpus holds too few held-out documents of (a user corpus): said, not silently absent
    empty = tuple(f"{name}: no held-out rows at seq_len {settings.seq_len} ({s.sources})"
                  for name, (s, r) in sets.items() if not len(r))
    sets = {name: (s, r) for name, (s, r) in sets.items() if len(r)}
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(settings.seed))
    k = key("data", corpus.digest, *ood_digests, tokenizer_digest(tokenizer_dir), str(settings.seq_len),
            str(settings.seed),
            code_digest("autocompress.data.stage", "autocompress.data.tokens", "autocompress.data.corpus"))
    return BuildData(train[order[: settings.calib_rows]], train[order[: settings.teacher_rows]],
                     {name: r for name, (_, r) in sets.items()}, corpus.description, len(corpus.docs), k,
                     tuple(s for s, _ in sets.values()), empty + missing_ood())
