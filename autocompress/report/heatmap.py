"""A PNG heatmap of a chosen architecture, written with the standard library only (zlib).

Rows are layers (top = layer 0); columns: attention KV heads kept, FFN width kept, each as a share
of the parent's (white = removed, dark blue = as the parent). Each cell is a block of pixels; a
thin grid separates layers. No plotting dependency: a build must not need matplotlib.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

CELL_W, CELL_H = 48, 10


def _color(share: float | None) -> tuple[int, int, int]:
    if share is None:  # not present in the parent (e.g. no attention in a Mamba layer)
        return (200, 200, 200)
    s = max(0.0, min(1.0, share))
    if s == 0.0:
        return (255, 255, 255)
    # white -> dark blue
    return (int(255 - s * (255 - 16)), int(255 - s * (255 - 64)), int(255 - s * (255 - 160)))


def _png(width: int, height: int, rows: list[bytes]) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def write_heatmap(path: str | Path, shares: list[tuple[float | None, float | None]]) -> Path:
    """``shares``: per layer (attention share, FFN share), each 0..1 or None."""
    cols = 2
    width, height = cols * CELL_W + (cols + 1), len(shares) * CELL_H + len(shares) + 1
    grid = (120, 120, 120)
    rows: list[bytes] = []
    line = bytes(grid) * width
    rows.append(line)
    for a, f in shares:
        cells = [_color(a), _color(f)]
        row = bytes(grid)
        for c in cells:
            row += bytes(c) * CELL_W + bytes(grid)
        rows.extend([row] * CELL_H)
        rows.append(line)
    path = Path(path)
    path.write_bytes(_png(width, height, rows))
    return path
