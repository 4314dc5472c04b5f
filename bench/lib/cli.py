"""The command line of a benchmark with modes: one subcommand per module of ``bench.lib``."""

from __future__ import annotations

import argparse
from types import ModuleType


def mode_parser(prog: str, doc: str, modes: dict[str, ModuleType]) -> argparse.ArgumentParser:
    """``prog MODE ...``: the script's docstring as description and epilog, each mode module's
    ``add_arguments`` under its name, its docstring's first line as the help."""
    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(doc.split("\n")[2:]))
    sub = ap.add_subparsers(dest="mode", required=True, metavar="MODE")
    for name, mod in modes.items():
        first = mod.__doc__.split("\n")[0]
        mod.add_arguments(sub.add_parser(name, help=first, description=first))
    return ap
