"""The verify ``acc build`` ends with: two interleaved passes when it built a baseline (an A/B is
judged at 5%, and one pass of the same two models read 0.929 and 1.036 on memory), one otherwise."""

from __future__ import annotations

from argparse import Namespace

import pytest
from _clikit import EXAMPLES

import autocompress.cli.verify_cmd as verify_cmd
import autocompress.measure.presence as presence
from autocompress.cli.build_cmd import verify_build


@pytest.mark.parametrize("baseline, passes", [("uniform", 2), (None, 1)])
def test_the_build_verifies_an_a_b_in_two_passes(monkeypatch, baseline, passes):
    seen = {}
    monkeypatch.setattr(presence, "hardware_present", lambda device: (True, "the host CPU"))
    monkeypatch.setattr(presence, "engine_available", lambda engine: (True, engine))
    monkeypatch.setattr(verify_cmd, "verify", lambda out, spec, threads, requests, console, passes=1, quiet=False:
                        seen.setdefault("passes", passes) and 0)
    args = Namespace(spec=str(EXAMPLES / "cpu-vllm.acspec"), baseline=baseline, quiet=True)
    assert verify_build(args, "out", console=None) == 0
    assert seen["passes"] == passes
