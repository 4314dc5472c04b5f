"""The ``acc`` command line: every subcommand's arguments (``main`` dispatches them)."""

from __future__ import annotations

import argparse
import os

from autocompress import __version__

CONFINE_HELP = ("for a spec you do not trust (a pull request's): the spec file and every path it names (model, "
                "profile, data, output) must resolve, symlinks followed, inside DIR, else it is an error at that "
                "path that says nothing of what is there; built-in aliases still work; no cache (docs/security.md)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="acc", description="autocompress: deployment contract in, compressed model out")
    p.add_argument("--version", action="version", version=f"autocompress {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("check", help="parse, validate and prove feasibility of a .acspec (no weights loaded)")
    c.add_argument("spec", help="path of the .acspec file")
    c.add_argument("--format", choices=("text", "md", "json"), default="text",
                   help="text: terminal summary (default); md: Markdown for a PR comment; json: machine-readable")
    c.add_argument("--out", metavar="FILE", help="write the md/json report to FILE (atomically) instead of stdout; "
                   "with --format md, its charts too (FILE-architecture.png, FILE-costs.png, beside it)")
    c.add_argument("--no-cache", action="store_true", help="recompute even if an identical check is cached")
    c.add_argument("--importance", metavar="FILE", help="use this importance file (acc build writes one in its "
                   "importance stage) instead of the prior; the report names it and its sha256")
    c.add_argument("--confine", metavar="DIR", type=_folder, help=CONFINE_HELP)

    b = sub.add_parser("build", help="compress the parent to meet the contract and export the model (needs torch)")
    b.add_argument("spec", help="path of the .acspec file")
    b.add_argument("--work", metavar="DIR", help="stage cache folder (default: next to the output, .<output>.acc)")
    b.add_argument("--quiet", action="store_true", help="no progress bars: plain log lines with rate and ETA")
    b.add_argument("--force", action="store_true", help="replace an earlier autocompress output of another spec "
                   "(a folder autocompress did not write is never replaced), and compress even when the parent "
                   "already meets the contract as measured")
    b.add_argument("--no-calibrate", action="store_true", help="hardware cpu: do not calibrate this machine first "
                   "when it has no profile (predictions then come from another machine's)")
    b.add_argument("--baseline", choices=("uniform",), help="also build the uniform (Minitron-style) model at the "
                   "same budget into <output>-uniform and compare them in the report")

    b.add_argument("--no-verify", action="store_true", help="skip `acc verify` at the end (it runs when the target "
                   "hardware is this machine and the engine is installed)")
    b.add_argument("--nproc", type=_positive, metavar="N", help="run the build in N processes on this machine "
                   "(torchrun's agent: data parallel, FSDP2 distillation); several machines: torchrun or srun, "
                   "see docs/scale-out.md")

    v = sub.add_parser("verify", help="run the contract's workloads on an exported model and judge every bound")
    v.add_argument("out", help="the exported model folder (acc build's output)")
    v.add_argument("spec", help="the .acspec contract")
    v.add_argument("--threads", type=int, help="engine threads on CPU (default: all cores)")
    v.add_argument("--requests", type=int, help="minimum timed requests per workload (default: max(8, 2 x concurrency) on "
                   "CPU, max(4, 2 x concurrency) on GPU); sampling goes on until each metric's SE is below 2%%")
    v.add_argument("--passes", type=int, default=1, help="repeat the interleaved schedule (parent, model, parent, "
                   "baseline, parent) this many times; the ratios are averaged and their spread reported")
    v.add_argument("--pairings", type=_pairings, default=0, metavar="K", help="also measure each model's time ratios to "
                   "the parent with paired engines (both loaded, taking turns in chunks of seconds) in K pairs of fresh "
                   "processes, start order swapped; the report's ratios then come with an SE (K >= 2; on held-out models "
                   "the fidelity benchmark's p95 ratio error was 7.6-8.2%% with 4, 7.2-10.4%% with 2 in two runs; 0: off, "
                   "the default)")
    v.add_argument("--quiet", action="store_true", help="no progress bars: plain log lines with rate and ETA")

    pr = sub.add_parser("profile", help="measure the engine on this machine and write a calibration profile")
    pr.add_argument("--hardware", required=True, help="catalog name of this machine's device (cpu for the host)")
    pr.add_argument("--engine", required=True, choices=("vllm", "transformers"))
    pr.add_argument("--out", metavar="FILE", help="profile file to write (default: in the acc cache's profiles folder, "
                    "where acc check, build and verify then find it: for cpu this machine's profile, for a catalog "
                    "GPU <hardware>-<engine>-measured-<parent tag>.json, used on any unit of that GPU)")
    pr.add_argument("--model", default="smollm2-135m", help="parent whose variants are measured (alias, folder, .gguf)")
    pr.add_argument("--threads", type=int, help="engine threads on CPU (default: all cores)")
    pr.add_argument("--quick", action="store_true", help="4 + 4 models instead of 7 + 13 (a rough profile)")
    pr.add_argument("--quiet", action="store_true", help="no progress bars: plain log lines with rate and ETA")
    pr.add_argument("--work", metavar="DIR", help="measurement cache and synthetic models (default: the acc cache); "
                    "python -m bench.fidelity uses bench/work/profiling")

    d = sub.add_parser("diff", help="what a spec change did: two contracts' verdicts, bounds, costs and starting "
                       "architectures side by side (no weights loaded)")
    d.add_argument("specs", nargs="+", metavar="SPEC", help="OLD.acspec NEW.acspec, or NEW.acspec with --base")
    d.add_argument("--base", metavar="REV", help="compare NEW.acspec with the same file at this git revision "
                   "(read with git cat-file; nothing in it is executed)")
    d.add_argument("--format", choices=("md", "json"), default="md",
                   help="md: Markdown for a PR comment (default); json: specs/spec-diff.schema.json")
    d.add_argument("--out", metavar="FILE", help="write the diff to FILE (atomically) instead of stdout")
    d.add_argument("--confine", metavar="DIR", type=_folder, help=CONFINE_HELP)

    e = sub.add_parser("eval", help="accuracy of a model folder and its parent on eight benchmarks (offline data)")
    e.add_argument("model", help="the model folder (an acc build output, or any Hugging Face folder)")
    e.add_argument("--parent", help="the parent to compare with (folder, .gguf, alias; default: the build's spec's)")
    e.add_argument("--full", action="store_true", help="every document (34,507; hours on CPU) instead of the "
                   "seeded subsamples (1,200)")
    e.add_argument("--tasks", help="comma-separated subset of arc_easy,arc_challenge,hellaswag,piqa,winogrande,"
                   "boolq,openbookqa,mmlu")
    e.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE (atomically)")
    e.add_argument("--work", metavar="DIR", help="stage cache folder (default: <acc cache>/accuracy)")
    e.add_argument("--quiet", action="store_true", help="plain progress lines instead of bars")

    f = sub.add_parser("fmt", help="print the canonical form of a .acspec")
    f.add_argument("spec")
    g = f.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="exit 1 if the file is not in canonical form")
    g.add_argument("--write", action="store_true", help="rewrite the file in place (atomically)")
    return p


def _folder(text: str) -> str:
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"not a folder: {text}")
    return text


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _positive(text: str) -> int:
    n = _whole(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"allowed: a whole number >= 1, got {text}")
    return n


def _pairings(text: str) -> int:
    # one pairing would share a single parent process among the models and swap no start order: its SE
    # would miss the level a pair of processes carries (a fresh pair of the parent against itself read
    # E2E 0.92, 1.01 and 0.97: ``measure.paired``)
    n = _whole(text)
    if n < 0 or n == 1:
        raise argparse.ArgumentTypeError(f"allowed: 0 (off) or a whole number >= 2, got {text}")
    return n
