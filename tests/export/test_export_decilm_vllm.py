"""Stock vLLM (CPU build) serves the exported heterogeneous DeciLM and agrees with transformers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("vllm")

from _exportkit import PROMPTS, greedy_hf, vllm_cpu_env  # noqa: E402
from _stockkit import NO_AUTOCOMPRESS  # noqa: E402

pytestmark = pytest.mark.slow

# A separate process: vLLM reads its environment at import time, and must not see autocompress.
_VLLM_RUNNER = NO_AUTOCOMPRESS + textwrap.dedent(
    """
    def main():
        from vllm import LLM, SamplingParams
        ckpt, prompt_ids, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
        llm = LLM(model=ckpt, trust_remote_code=True, dtype="float32", enforce_eager=True,
                  max_model_len=256, max_num_seqs=4, seed=0)
        params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        outs = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        arch = llm.llm_engine.model_config.architectures
        print("RESULT " + json.dumps({"arch": arch, "tokens": [list(o.outputs[0].token_ids) for o in outs]}))

    if __name__ == "__main__":
        main()
    """
)


def test_vllm_serves_heterogeneous_decilm_like_transformers(hetero_checkpoint, tmp_path):
    from transformers import AutoTokenizer

    ckpt, ref = hetero_checkpoint
    tok = AutoTokenizer.from_pretrained(ckpt, trust_remote_code=True)
    expected = greedy_hf(ref, tok)
    prompt_ids = [tok(p)["input_ids"] for p in PROMPTS]
    script = tmp_path / "run_vllm.py"
    script.write_text(_VLLM_RUNNER)
    run = subprocess.run(
        [sys.executable, str(script), str(ckpt), json.dumps(prompt_ids), "12"],
        cwd=tmp_path, env=vllm_cpu_env(tmp_path), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT "))
    got = json.loads(line.removeprefix("RESULT "))
    assert got == {"arch": ["DeciLMForCausalLM"], "tokens": expected}
