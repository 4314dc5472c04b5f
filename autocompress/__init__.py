"""autocompress: deployment contract in, compressed model out.

Importing the package is cheap and has no side effects: no torch, transformers or cvxpy import,
no import hooks. The folders follow the pipeline (ARCHITECTURE.md has the module map):

    lang -> parents -> plan -> feasibility -> report          (acc check, check.py)
    ... -> compress (acc build, build/pipeline.py) -> export -> measure (acc verify, acc profile)

Exported heterogeneous checkpoints carry their own modeling code (``auto_map``): load them with
``trust_remote_code=True``, or call ``autocompress.modeling.register.register()`` once in a process
to load them without remote code.
"""

__version__ = "0.2.0"
