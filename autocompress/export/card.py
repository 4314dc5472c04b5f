"""What an exported folder says about itself: the model card (``README.md``) and an
``autocompress`` block in ``config.json``.

Both state the parent, the contract (target and every bound), the predicted costs, the measured
ones once ``acc verify`` ran (``with_measured``), the quality retained (measured on held-out data
at build time) and the license, inherited from the parent (``parent_license``: GGUF
``general.license``, the parent README's front matter, or its LICENSE files, which are copied).
The block is built from the build report and the feasibility report (``card_block``, pure), kept
in ``config.json`` (transformers keeps unknown keys as attributes and vLLM ignores them), and the
card is rendered from that block and the folder's own config.json (``render_card``, pure, a golden
test pins it), so ``acc verify`` can re-render it with measurements without the build's state. How
the folder loads is read off its config.json as transformers and vLLM read it (``architectures``,
``model_type``, ``auto_map``), never from which family or format wrote it.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autocompress import __version__
from autocompress.cache import atomic_write_text
from autocompress.parents.gguf_meta import read_gguf
from autocompress.report.feasibility import fmt_value

LICENSE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "NOTICE", "NOTICE.txt", "USE_POLICY.md")


def parent_license(parent) -> dict:
    """``{"id", "source", "files"}`` of a ``parents.resolve.ParentInfo``: the license identifier
    (SPDX-like, as the parent states it) or None, where it was read, and license files to copy."""
    folder = Path(parent.path).parent
    files = [str(folder / n) for n in LICENSE_FILES if parent.format != "gguf" and (folder / n).is_file()]
    if parent.format == "gguf":
        lic = read_gguf(parent.path).metadata.get("general.license")
        return {"id": str(lic) if lic else None, "source": "GGUF metadata general.license" if lic else None,
                "files": files}
    readme = folder / "README.md"
    if readme.is_file():
        m = re.match(r"---\n(.*?)\n---", readme.read_text(encoding="utf-8", errors="replace"), re.S)
        lic = re.search(r"^license:\s*[\"']?([^\"'\n]+)", m.group(1), re.M) if m else None
        if lic:
            return {"id": lic.group(1).strip(), "source": "the parent's README.md front matter", "files": files}
    return {"id": None, "source": "the parent's license files" if files else None, "files": files}


def card_block(build: dict, check: dict, license: dict) -> dict:
    """The ``config.json`` block of an export, from its build report and feasibility report."""
    q = build["quality"]
    return {
        "autocompress": __version__,
        "strategy": build["strategy"],
        "parent": {"name": check["parent"]["name"], "description": check["parent"]["description"],
                   "config_sha256": check["parent"]["config_sha256"], "params": build["parent_architecture"]["params"]},
        "license": {"id": license["id"], "source": license["source"]},
        "contract": {"spec": build["spec"], "sha256": check["spec"]["sha256"], "target": check["target"],
                     "bounds": [{"name": c["name"], "metric": c["metric"], "op": c["op"], "bound": c["bound"]}
                                for c in build["predicted"]["checks"]]},
        "params": build["architecture"]["params"],
        "hidden": build["architecture"]["hidden"],
        "predicted": {"profile": build["predicted"]["profile"], "profile_source": build["predicted"]["profile_source"],
                      "values": {c["name"]: c["predicted"] for c in build["predicted"]["checks"]}},
        "measured": None,
        "quality": {kind: {"tokens": s["tokens"], "ppl": s["ppl"], "parent_ppl": q["parent"][kind]["ppl"],
                           "kl": s["kl"], "top1": s["top1"]} for kind, s in q["student"].items()},
        "plots": [e["file"] for e in build.get("plots") or [] if e["file"]],
    }


def with_measured(block: dict, verify: dict) -> dict:
    """The block with ``acc verify``'s measurements (only when it measured)."""
    if verify["status"] != "measured":
        return block
    return {**block, "measured": {"engine": verify["engine"], "host": verify["host"], "created": verify["created"],
                                  "values": {b["name"]: b["measured"] for b in verify["bounds"]},
                                  "pass": {b["name"]: b["pass"] for b in verify["bounds"]}}}


def _yaml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid YAML scalar


def _loading(config: Mapping[str, Any]) -> list[str]:
    """The card's loading paragraph, from the exported config.json: a folder with an ``auto_map``
    ships its own code (every heterogeneous export), one without loads through a stock class."""
    model_class = (config.get("architectures") or ["AutoModelForCausalLM"])[0]
    auto_map = config.get("auto_map") or {}
    if not auto_map:
        return [f"A plain `{model_class}` checkpoint: `vllm serve OUT`, `AutoModelForCausalLM.from_pretrained(OUT)` "
                "and `AutoTokenizer.from_pretrained(OUT)` load it; no remote code."]
    # A folder that ships its configuration class holds a format vLLM implements itself; one that
    # ships only model classes over a stock configuration runs in vLLM's Transformers backend.
    own_config = "AutoConfig" in auto_map
    return [f"A heterogeneous {model_class.removesuffix('ForCausalLM')} (`{config.get('model_type')}`) checkpoint: its "
            f"{'configuration and modeling code ship' if own_config else 'modeling code ships'} in this folder "
            "(`auto_map`).", "",
            f"- vLLM serves it {'natively' if own_config else 'through its Transformers backend'}: `vllm serve OUT "
            "--trust-remote-code` (or `LLM(OUT, trust_remote_code=True)`).",
            "- transformers: `AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)`.",
            "- The tokenizer is a stock class and runs no code: `AutoTokenizer.from_pretrained(OUT, "
            "trust_remote_code=False)` loads it without a prompt (plain `AutoTokenizer.from_pretrained(OUT)` "
            "asks about the model's code, because transformers reads the model config first)."]


def render_card(block: dict, config: Mapping[str, Any]) -> str:
    """The model card of an export: ``block`` (``card_block``, ``with_measured``) and the folder's
    config.json (``config``: only how the folder loads is read from it)."""
    c, t, lic = block["contract"], block["contract"]["target"], block["license"]
    meas = block["measured"]
    front = ["---", f"license: {lic['id'] if lic['id'] else 'other'}", "library_name: transformers",
             "tags:", "  - autocompress", "  - pruned", "  - distilled", "---", ""]
    out = front + [f"# {Path(c['spec']).stem} ({block['strategy']})", "",
                   f"Compressed by autocompress {block['autocompress']} from **{block['parent']['description']}** "
                   f"to meet the deployment contract `{c['spec']}` (sha256 {c['sha256'][:12]}...): "
                   f"{block['params'] / 1e6:,.1f}M of {block['parent']['params'] / 1e6:,.1f}M parameters, hidden "
                   f"{block['hidden']}.", "",
                   "## Contract", "",
                   f"Target: {t['hardware']}, {t['engine']}, {t['weight_precision']} weights, {t['kv_precision']} KV "
                   f"cache, tensor parallel {t['tensor_parallel']}. Predictions: profile `{block['predicted']['profile']}`"
                   f" ({block['predicted']['profile_source']}).", "",
                   "| bound | contract | predicted | measured |", "|---|---|---|---|"]
    for b in c["bounds"]:
        m = meas["values"].get(b["name"]) if meas else None
        mt = "not measured" if m is None else fmt_value(b["metric"], m) + ("" if meas["pass"][b["name"]] else " (fails)")
        out.append(f"| {b['name']} | {b['op']} {fmt_value(b['metric'], b['bound'])} | "
                   f"{fmt_value(b['metric'], block['predicted']['values'][b['name']])} | {mt} |")
    out += ["", f"Measured by `acc verify` on {meas['host']} ({meas['engine']}, {meas['created']})." if meas else
            "Nothing measured yet: `acc verify OUT SPEC` on the target fills the measured column.", "",
            "## Quality retained (measured on held-out data at build time)", "",
            "| data | tokens | parent ppl | this model ppl | KL(parent‖this) | top-1 agreement |", "|---|---|---|---|---|---|"]
    for kind, s in block["quality"].items():
        kl = "-" if s["kl"] is None else f"{s['kl']:.4f}"
        t1 = "-" if s["top1"] is None else f"{s['top1']:.1%}"
        out.append(f"| {kind} | {s['tokens']:,} | {s['parent_ppl']:.2f} | {s['ppl']:.2f} | {kl} | {t1} |")
    out += ["", "## Loading", ""] + _loading(config)
    out += ["", "## License", ""]
    if lic["id"]:
        out.append(f"Inherited from the parent: **{lic['id']}** (read from {lic['source']}). A compressed model is "
                   "a derivative of its parent; the parent's terms apply.")
    else:
        out.append("The parent states no license that autocompress could read; its terms apply to this derivative.")
    if block["plots"]:
        out += ["", "## Plots", ""] + [f"![{p.removesuffix('.png')}]({p})" for p in block["plots"]]
    out += ["", "Built with autocompress; `autocompress-report.md` in this folder has the full build report.", ""]
    return "\n".join(out)


def write_card(out: Path, block: dict, license_files=()) -> None:
    """Put ``block`` into ``out/config.json`` and render ``out/README.md``; copy the parent's license files."""
    cfg_path = Path(out) / "config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["autocompress"] = block
    atomic_write_text(cfg_path, json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for f in license_files:
        shutil.copy2(f, Path(out) / Path(f).name)
    atomic_write_text(Path(out) / "README.md", render_card(block, cfg))


def update_measured(out: Path, verify: dict) -> bool:
    """After ``acc verify``: the measured column of the card and the config block. False when the
    folder has no autocompress block (an older export)."""
    cfg = json.loads((Path(out) / "config.json").read_text(encoding="utf-8"))
    if "autocompress" not in cfg:
        return False
    write_card(out, with_measured(cfg["autocompress"], verify))
    return True
