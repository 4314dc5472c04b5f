"""The native MoE build family: Mixtral, Qwen2-MoE and Qwen3-MoE parents, exported in their own formats."""
