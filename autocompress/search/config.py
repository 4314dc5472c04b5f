"""The search's configuration in a build: the refinement's and router v2's configs, derived from
the build settings, and what of them the search stage's cache key holds."""

from __future__ import annotations

import json
from dataclasses import asdict

from autocompress.build.settings import BuildSettings
from autocompress.search.refine import RefineConfig
from autocompress.search.router_v2 import RouterV2Config


def search_configs(settings: BuildSettings) -> tuple[RefineConfig, RouterV2Config]:
    """(refinement config, router v2 config) of a build: the search stage runs with these and its
    cache key holds them, so a changed default re-runs the search. Router v2's steps are its
    token budget over the tokens a step reads (search batch x search tokens per sequence)."""
    per_step = settings.search_batch * settings.search_seq
    v2 = RouterV2Config(steps=max(1, settings.search_tokens // per_step), tau_start=settings.search_temperature,
                        tau_end=settings.search_temperature / 20, seed=settings.seed)
    return RefineConfig(), v2


def search_key_parts(settings: BuildSettings) -> tuple[str, str]:
    """What the search stage's cache key holds besides its upstream keys: every build setting and
    both search configs, defaults included."""
    configs = [asdict(c) for c in search_configs(settings)]
    return json.dumps(settings.as_dict(), sort_keys=True), json.dumps(configs, sort_keys=True)


__all__ = ["search_configs", "search_key_parts"]
