#!/usr/bin/env python3
"""The real Gemma 3 270M through the build's own stages, exported *before distillation*, loaded in
stock transformers and stock vLLM (CPU) on this host: the chosen architecture of a finished search
stage (``acc build`` of ``examples/gemma3-cpu-vllm.acspec`` leaves it in the work folder), sliced
from the permuted parent, exported by the family, then greedy-decoded by both engines.

It shows the export path on the real model (hidden-size rescaling of the tied embedding, the
format vLLM serves) when a full build (distillation included) does not fit the time at hand; the
quality of an undistilled student is not a result.

    python bench/gemma3_export_check.py [--spec examples/gemma3-cpu-vllm.acspec] [--out bench/work/gemma3-export]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]
_VLLM = textwrap.dedent("""
    import json, sys
    def main():
        from vllm import LLM, SamplingParams
        llm = LLM(model=sys.argv[1], trust_remote_code=True, dtype="float32", enforce_eager=True, max_model_len=256,
                  max_num_seqs=4, max_num_batched_tokens=256, seed=0)
        outs = llm.generate([{"prompt_token_ids": p} for p in json.loads(sys.argv[2])],
                            SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True), use_tqdm=False)
        print("RESULT " + json.dumps({"arch": llm.llm_engine.model_config.architectures,
                                      "tokens": [list(o.outputs[0].token_ids) for o in outs]}))
    if __name__ == "__main__":
        main()
""")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", default=str(ROOT / "examples" / "gemma3-cpu-vllm.acspec"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "work" / "gemma3-export"))
    args = ap.parse_args()
    import torch
    from transformers import AutoTokenizer

    sys.path.insert(0, str(ROOT / "tests" / "export"))
    from _exportkit import vllm_cpu_env

    from autocompress.compress.prepare import prepare
    from autocompress.ir import arch_from_dict
    from autocompress.progress import Progress

    spec = Path(args.spec)
    work = spec.parent / "out" / f".{spec.stem}.acc"
    stage = next(iter(sorted(work.glob("search-autocompress-*/architecture.json"))), None)
    if stage is None:
        sys.exit(f"no finished search stage under {work}: run acc build on {spec} first")
    t0 = time.time()
    p = prepare(str(spec), work, Progress())  # every stage cached by the build
    chosen = json.loads(stage.read_text())
    arch = arch_from_dict(chosen["architecture"], p.parent.architecture)
    state, extras = p.family.extract(p.permuted, p.cfg, arch)
    out = Path(args.out)
    fmt = p.family.export(out, arch, state, p.folder, extras)
    print(f"exported {fmt}: hidden {arch.hidden_size}, {arch.params() / 1e6:.1f}M params ({chosen['how']}) "
          f"in {time.time() - t0:.0f} s")
    tok = AutoTokenizer.from_pretrained(str(out))
    ids = [tok(x)["input_ids"] for x in PROMPTS]
    model = p.family.load_exported(out)
    hf = []
    for x in ids:
        t = torch.tensor([x])
        with torch.no_grad():
            g = model.generate(t, attention_mask=torch.ones_like(t), max_new_tokens=12, do_sample=False,
                               eos_token_id=None, pad_token_id=0)
        hf.append(g[0, len(x):].tolist())
    student = p.family.student(arch, state, extras)
    with torch.no_grad():  # the export computes the student's function
        t = torch.tensor([ids[0]])
        diff = (model(t).logits - student(t)).abs().max().item()
    print(f"transformers: {type(model).__name__}, max |logit - student| {diff:.2e}")
    for x, y in zip(PROMPTS, hf):
        print(f"  {x!r} -> {tok.decode(y)!r}")
    script = out.parent / "run_vllm.py"
    script.write_text(_VLLM)
    run = subprocess.run([sys.executable, str(script), str(out), json.dumps(ids)], cwd=str(out.parent),
                         env=vllm_cpu_env(out.parent), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=1200)
    if run.returncode != 0:
        print((run.stdout + run.stderr)[-3000:])
        return 1
    got = json.loads(next(x for x in run.stdout.splitlines() if x.startswith("RESULT ")).removeprefix("RESULT "))
    same = sum(a == b for a, b in zip(got["tokens"], hf))
    print(f"vllm-cpu: {got['arch']}, greedy tokens equal to transformers' for {same}/{len(hf)} prompts")
    for x, y in zip(PROMPTS, got["tokens"]):
        print(f"  {x!r} -> {tok.decode(y)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
