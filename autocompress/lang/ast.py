"""Typed, frozen AST of a .acspec file: one node per grammar rule shape, each with its span.

The parse tree never leaves ``parser.py``; ``lower.py`` reads these nodes. Values keep the
user's text (``Number.text``, ``Unit.text``) so messages and the formatter can quote it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from autocompress.diagnostics import Span


@dataclass(frozen=True)
class Number:
    text: str  # as written: '512', '3e-4', '32K'
    span: Span


@dataclass(frozen=True)
class Unit:
    text: str
    span: Span


@dataclass(frozen=True)
class Quantity:
    number: Number
    unit: Unit | None
    span: Span


@dataclass(frozen=True)
class Name:
    text: str
    span: Span


@dataclass(frozen=True)
class String:
    text: str  # unescaped, without quotes
    span: Span


Value = Union[Number, Quantity, Name, String, tuple]


@dataclass(frozen=True)
class Setting:
    """``key value``: hardware rtx-5080, input 512 tokens, axes hidden, ffn, data "a", "b"."""

    key: str
    value: Value  # tuple of Name / String for the list settings (axes, data)
    span: Span
    key_span: Span


@dataclass(frozen=True)
class Limit:
    """``memory <= 512 MiB``."""

    key: str
    op: str
    op_span: Span
    quantity: Quantity
    span: Span
    key_span: Span


@dataclass(frozen=True)
class BoundNode:
    """``tpot p99 <= 2 ms``."""

    metric: str
    percentile: str | None  # 'p99' as written
    op: str
    op_span: Span
    quantity: Quantity
    span: Span
    key_span: Span
    percentile_span: Span | None = None

    @property
    def key(self) -> str:
        return self.metric + (f" {self.percentile}" if self.percentile else "")


@dataclass(frozen=True)
class CustomHardware:
    """``hardware custom "my-gpu" { memory 24 GiB ... }``."""

    name: String
    settings: tuple[Setting, ...]
    span: Span
    key_span: Span
    key: str = "hardware"


Item = Union[Setting, Limit, BoundNode, CustomHardware]


@dataclass(frozen=True)
class Section:
    """A top-level section: ``model "x"``, ``target { ... }``, ``workload npc { ... }``."""

    kind: str  # model | target | workload | search | distill | evaluate | output
    label: Name | String | None  # model/output string, workload name
    items: tuple[Item, ...]
    span: Span
    key_span: Span


@dataclass(frozen=True)
class SpecFile:
    sections: tuple[Section, ...]
