"""Every broken spec under broken/ fails with its pinned, fully rendered error text.

These messages are the product's face: each .expected file was read and judged by a person.
Regenerate with UPDATE_GOLDEN=1 and review the diff.
"""

import re
from pathlib import Path

import pytest

from autocompress.diagnostics import SpecError
from autocompress.lang.api import load_spec

HERE = Path(__file__).resolve().parent

BROKEN = sorted((HERE / "broken").glob("*.acspec"))


def render(path: Path) -> str:
    rel = path.relative_to(HERE.parent.parent).as_posix()
    with pytest.raises(SpecError) as info:
        load_spec(rel)
    return info.value.render() + "\n"


def test_enough_broken_specs():
    assert len(BROKEN) >= 45


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_broken_spec(path, in_repo, golden):
    text = render(path)
    golden(path.with_suffix(".expected"), text)
    # every error names its place and carries a caret under the source line
    for block in re.split(r"\n(?=\S)", text.strip()):
        head = block.splitlines()[0]
        if not head.startswith(" "):
            assert re.match(r"^tests/lang/broken/[^:]+(:\d+:\d+)?: (error|warning): ", head), head
        if re.match(r"^[^:]+:\d+:\d+: ", head) and len(block.splitlines()) > 1 and "|" in block.splitlines()[1]:
            assert "^" in block.splitlines()[2]
