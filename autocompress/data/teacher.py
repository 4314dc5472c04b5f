"""Teacher outputs, computed once and cached as top-k logits; the top-k distillation loss.

A teacher forward of the parent costs as much as a student step, and search and distillation visit the
same sequences many times, so the parent runs once per token dataset. Per position we keep the k largest
logits (values, indices) and the logsumexp of the full row, which gives the exact probability of every
kept token and the total mass of the rest (the "tail"):

    <cache_root>/teacher/<key>/chunk-00000.safetensors ...   values [c, T, k] fp16|fp32, indices int32 [c, T, k],
                                                           lse fp32 [c, T]   (c = chunk rows, T = seq_len)
    <cache_root>/teacher/<key>/meta.json                     written last: the cache is complete

``key`` hashes our version, the caller's teacher identity (e.g. the parent's content hash), the token
tensor's bytes, k and the value dtype. Chunks are written atomically one by one, each carrying the digest
of its tensors (``data.checked``), so a run that dies keeps its finished chunks and the next run computes
only the missing ones. Every chunk is checked before the cache is used: a truncated or altered chunk is a
warning and is recomputed, never loaded. Processes that share the cache compute one folder under its lock
(``build.lock.wait_for``, ``lock.lock_path``): the second waits and then reads what the first wrote.

The loss (``topk_kl``) is KL(teacher || student) between the two distributions *coarsened* to k + 1
outcomes: each kept token, and one bucket for everything else. By the data-processing inequality it never
exceeds the full KL; it equals it when k covers the whole vocabulary (no bucket), and is close when the
teacher's top k carry most of its mass and the student spreads its tail roughly as the teacher does
(within the tail the two are compared only in total). Minitron / Puzzletron distil on full logits; top-k
caches with a tail term follow the sparse-logit KD literature (e.g. "Sparse Logit Sampling", 2025).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from autocompress.build import dist, lock
from autocompress.cache import atomic_write_bytes, atomic_write_json, cache_root, code_digest, key, sha256_bytes
from autocompress.data.checked import Corrupt, dumps, loads

DEFAULT_K = 32


@dataclass(frozen=True)
class TopK:
    values: torch.Tensor  # [..., T, k] teacher logits of the kept tokens
    indices: torch.Tensor  # [..., T, k] their token ids (int32 on disk, int64 here)
    lse: torch.Tensor  # [..., T] logsumexp of the teacher's full logit row (fp32)


def topk_of(logits: torch.Tensor, k: int = DEFAULT_K) -> TopK:
    logits = logits.float()
    v, i = logits.topk(min(k, logits.shape[-1]), dim=-1)
    return TopK(v, i, torch.logsumexp(logits, dim=-1))


def logits_of(model: Callable, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits from a plain callable (ids -> logits) or a transformers-style model (ids -> output.logits)."""
    if any(c.__name__ == "PreTrainedModel" for c in type(model).__mro__):  # transformers, not imported here
        out = model(input_ids=input_ids, use_cache=False)  # no KV cache for full-sequence passes
    else:
        out = model(input_ids)
    return out.logits if hasattr(out, "logits") else out


class TeacherCache:
    """Top-k teacher outputs for the rows of one token dataset (``[n, seq_len + 1]``), read by row."""

    def __init__(self, folder: Path, rows: int, chunk_rows: int, k: int, vocab: int):
        self.folder, self.rows, self.chunk_rows, self.k, self.vocab = folder, rows, chunk_rows, k, vocab
        self._chunks: dict[int, dict[str, torch.Tensor]] = {}

    def _chunk(self, c: int) -> dict[str, torch.Tensor]:
        if c not in self._chunks:
            self._chunks[c] = loads(self.folder / f"chunk-{c:05d}.safetensors")[0]
        return self._chunks[c]

    def get(self, rows: torch.Tensor | list[int]) -> TopK:
        """Top-k outputs of the given dataset rows, stacked in that order (values as fp32)."""
        vs, ids, lses = [], [], []
        for r in torch.as_tensor(rows).tolist():
            ch = self._chunk(r // self.chunk_rows)
            j = r % self.chunk_rows
            vs.append(ch["values"][j].float())
            ids.append(ch["indices"][j].long())
            lses.append(ch["lse"][j])
        return TopK(torch.stack(vs), torch.stack(ids), torch.stack(lses))


def cache_teacher(
    teacher: Callable,
    tokens: torch.Tensor,
    teacher_id: str,
    k: int = DEFAULT_K,
    batch: int = 4,
    chunk_rows: int = 64,
    dtype: torch.dtype = torch.float16,
    cache_dir: str | os.PathLike | None = None,
    on_chunk: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> TeacherCache:
    """Run ``teacher`` over ``tokens[:, :-1]`` once (resumable per chunk) and return the cache.

    ``teacher_id`` names the teacher's content (a callable cannot be hashed): the parent's weights hash.
    ``dtype`` of the stored logit values: fp16 halves the file (relative error ~5e-4 on a logit).
    ``log``: where warnings (a corrupt chunk) and waits (another process fills the cache) go; stderr by default.
    """
    tokens = tokens.long()
    n = tokens.shape[0]
    tok_digest = sha256_bytes(tokens.to(torch.int32).contiguous().numpy().tobytes() + str(tuple(tokens.shape)).encode())
    kk = key(code_digest("autocompress.data.teacher"), teacher_id, tok_digest, f"k={k}", str(dtype), f"chunk={chunk_rows}")
    folder = Path(cache_dir or cache_root() / "teacher") / kk[:24]
    log = log or _stderr
    if dist.active():  # one build's ranks: rank 0 decides and writes (below)
        return _cache_teacher(teacher, tokens, teacher_id, k, batch, chunk_rows, dtype, folder, on_chunk, log)
    meta = _complete(folder, chunk_rows, n, log)
    if meta is not None:
        return TeacherCache(folder, n, chunk_rows, meta["k"], meta["vocab"])
    with lock.wait_for(lock.lock_path(folder), f"teacher outputs {folder.name}", log):
        return _cache_teacher(teacher, tokens, teacher_id, k, batch, chunk_rows, dtype, folder, on_chunk, log)


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _complete(folder: Path, chunk_rows: int, n: int, log) -> dict | None:
    """``meta.json`` of a finished cache whose chunks all match their digests, else None (a damaged
    chunk is removed with a warning, and ``meta.json`` with it, so that chunk is recomputed)."""
    meta_path = folder / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
        int(meta["k"]), int(meta["vocab"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        log(f"warning: cached teacher outputs at {folder} are corrupt (meta.json: unreadable); recomputing")
        meta_path.unlink(missing_ok=True)
        return None
    bad = _damaged(folder, (n + chunk_rows - 1) // chunk_rows, log)
    if bad:
        meta_path.unlink(missing_ok=True)
        return None
    return meta


def _damaged(folder: Path, chunks: int, log) -> list[int]:
    """The chunks that are there but fail their checksum: removed, with a warning each."""
    bad = []
    for c in range(chunks):
        path = folder / f"chunk-{c:05d}.safetensors"
        if not path.exists():
            continue
        why = _corrupt(path)
        if why is not None:
            log(f"warning: cached teacher outputs at {folder} are corrupt ({why}); recomputing")
            path.unlink(missing_ok=True)
            bad.append(c)
    return bad


def _corrupt(path: Path) -> str | None:
    try:
        loads(path)
    except Corrupt as e:
        return str(e)
    return None


def _cache_teacher(teacher, tokens, teacher_id, k, batch, chunk_rows, dtype, folder: Path, on_chunk, log
                   ) -> TeacherCache:
    n = tokens.shape[0]
    meta_path = folder / "meta.json"
    # under a launcher (build.dist) rank 0 decides what is done and alone writes; each chunk's
    # batches are split over the ranks and gathered back in order (the same bytes at any world size)
    meta = _complete(folder, chunk_rows, n, log) if dist.is_main() else None
    if dist.from_main(meta is not None):
        meta = meta or json.loads(meta_path.read_text())
        return TeacherCache(folder, n, chunk_rows, meta["k"], meta["vocab"])
    if dist.is_main():
        _damaged(folder, (n + chunk_rows - 1) // chunk_rows, log)  # chunks of an interrupted run

    vocab = None
    chunks = (n + chunk_rows - 1) // chunk_rows
    for c in range(chunks):
        path = folder / f"chunk-{c:05d}.safetensors"
        if dist.from_main(path.is_file()):  # finished by an earlier run (and checked by _damaged above)
            continue
        parts: list[TopK] = []
        with torch.no_grad():
            starts = range(c * chunk_rows, min(n, (c + 1) * chunk_rows), batch)
            for s in (dist.share(len(starts)) if dist.active() else range(len(starts))):
                s = starts[s]
                logits = logits_of(teacher, tokens[s : min(s + batch, (c + 1) * chunk_rows, n), :-1])
                vocab = logits.shape[-1]
                parts.append(topk_of(logits, k))
        if dist.active():
            parts, vocab = _gathered(parts, len(starts), batch, min(n, (c + 1) * chunk_rows) - c * chunk_rows,
                                     tokens.shape[1] - 1, k, teacher, tokens)
        data = {
            "values": torch.cat([p.values for p in parts]).to(dtype).contiguous(),
            "indices": torch.cat([p.indices for p in parts]).to(torch.int32).contiguous(),
            "lse": torch.cat([p.lse for p in parts]).float().contiguous(),
        }
        if dist.is_main():
            atomic_write_bytes(path, dumps(data, {"vocab": str(vocab)}))
        if on_chunk:
            on_chunk(c + 1, chunks)
    if vocab is None:  # every chunk came from an earlier run: read the vocab from one
        vocab = int(loads(folder / "chunk-00000.safetensors")[1]["vocab"])
    if dist.is_main():
        atomic_write_json(meta_path, {"k": min(k, vocab), "vocab": vocab, "rows": n, "chunk_rows": chunk_rows,
                                      "teacher": teacher_id})
    dist.barrier()  # every rank reads the chunks rank 0 wrote
    return TeacherCache(folder, n, chunk_rows, min(k, vocab), vocab)


def _gathered(mine: list[TopK], batches: int, batch: int, rows: int, T: int, k: int, teacher, tokens
              ) -> tuple[list[TopK], int]:
    """Every rank's top-k batches of one chunk, in order: ([one TopK of the chunk's rows], vocab)."""
    with torch.no_grad():  # a one-token forward gives the vocabulary to a rank that had no batch
        vocab = logits_of(teacher, tokens[:1, :1]).shape[-1]
    kk = min(k, vocab)

    def stacked(field: str, shape: tuple, dtype) -> torch.Tensor:
        out = torch.zeros((len(mine), batch, *shape), dtype=dtype)
        for i, p in enumerate(mine):
            v = getattr(p, field)
            out[i, : len(v)] = v
        return dist.gather_rows(out, batches).flatten(0, 1)[:rows]

    return [TopK(stacked("values", (T, kk), torch.float32), stacked("indices", (T, kk), torch.int64),
                 stacked("lse", (T,), torch.float32))], vocab


def topk_kl(student_logits: torch.Tensor, target: TopK, mask: torch.Tensor | None = None,
            reduction: str = "mean") -> torch.Tensor:
    """Mean over positions of KL(teacher || student) on the top-k support plus one tail bucket
    (``reduction="sum"``: the sum, for a mean over the positions of several processes).

    With p the teacher's and q the student's distribution, S the teacher's top-k tokens:
        KL ~= sum_{i in S} p_i (log p_i - log q_i) + p_tail (log p_tail - log q_tail),
        p_i = exp(z_i - lse), p_tail = 1 - sum_S p_i, log q_tail = logsumexp of the student's logits off S.
    Exact when S is the whole vocabulary (the tail term is then dropped). See the module docstring.
    """
    logq = torch.log_softmax(student_logits.float(), dim=-1)
    idx = target.indices.long()
    logp_s = target.values.float() - target.lse.unsqueeze(-1)  # [.., T, k]
    p_s = logp_s.exp()
    kl = (p_s * (logp_s - logq.gather(-1, idx))).sum(-1)
    if idx.shape[-1] < student_logits.shape[-1]:
        p_tail = (1.0 - p_s.sum(-1)).clamp_min(0.0)
        logq_tail = logq.scatter(-1, idx, float("-inf")).logsumexp(-1)
        # xlogy-style: a tail the teacher gives no mass adds nothing, whatever the student puts there.
        logp_tail = torch.log(p_tail.clamp_min(1e-30))
        kl = kl + torch.where(p_tail > 0, p_tail * (logp_tail - logq_tail), torch.zeros_like(kl))
    if reduction == "sum":
        return kl.sum() if mask is None else (kl * mask.to(kl.dtype)).sum()
    if mask is None:
        return kl.mean()
    mask = mask.to(kl.dtype)
    return (kl * mask).sum() / mask.sum().clamp_min(1.0)


def full_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Reference: mean over positions of the exact KL(teacher || student) on full logit rows."""
    logp = torch.log_softmax(teacher_logits.float(), dim=-1)
    logq = torch.log_softmax(student_logits.float(), dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1).mean()


__all__ = ["DEFAULT_K", "TeacherCache", "TopK", "cache_teacher", "full_kl", "logits_of", "topk_kl", "topk_of"]
