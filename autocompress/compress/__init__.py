"""``acc build``: the compression pipeline (``pipeline.run_build``) and its stages.

Stage modules, in pipeline order: corpus / tokens (data), importance, permute, teacher, search
(tables, router, refine, supernet), extract, distill, evaluate (quality). Orchestration lives in
``pipeline`` and ``stages``; the stage modules hold the math.
"""
