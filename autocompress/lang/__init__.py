"""The .acspec language: grammar (grammar/acspec.lark) -> AST -> checked, frozen ``Spec``.

Entry points live in ``lang.api`` (``load_spec``, ``parse_spec``, ``format_spec``); the stages are
parser -> lower -> schema -> semantic -> model.spec_from_projection.
"""
