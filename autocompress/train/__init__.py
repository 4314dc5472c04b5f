"""Distillation of the extracted student from the teacher's cached outputs, in one process or over several (FSDP2)."""
