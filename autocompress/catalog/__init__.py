"""Literal registries (style rule 8): hardware (with sources), engines, precisions. Every name the
grammar accepts has an entry and vice versa (tests/catalog)."""
