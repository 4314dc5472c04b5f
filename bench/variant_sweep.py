#!/usr/bin/env python3
"""What the global-size sweep costs and buys (``feasibility/variants.py``), per example with such
sizes: one assessment at the parent's Mamba2 heads and expert width against the whole sweep, with
the importance each keeps, in one process (imports warmed first).

    python bench/variant_sweep.py [EXAMPLE ...]   (default: every example whose parent has global sizes)
"""

from __future__ import annotations

import glob
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(names: list[str]) -> None:
    from autocompress.feasibility.assess import assess
    from autocompress.feasibility.objective import prior_importance
    from autocompress.feasibility.variants import assess_variants
    from autocompress.lang.api import load_spec
    from autocompress.parents.resolve import resolve_parent
    from autocompress.plan.derive import derive

    os.chdir(os.path.join(ROOT, "examples"))
    names = names or [os.path.basename(p)[:-7] for p in sorted(glob.glob("*.acspec"))]
    print(f"load average {os.getloadavg()[0]:.2f}")
    for name in names:
        spec = load_spec(f"{name}.acspec")
        parent = resolve_parent(spec.parent, ".").architecture
        d = derive(spec, parent, ".")
        if len(d.space.mamba_heads) <= 1 and len(d.space.expert_widths) <= 1:
            continue
        imp = prior_importance(parent)
        assess(spec, parent, d.profile, d.device, d.space, imp, d.limits)  # warm
        t = time.perf_counter()
        one = assess(spec, parent, d.profile, d.device, d.space, imp, d.limits)
        t1 = time.perf_counter() - t
        t = time.perf_counter()
        swept = assess_variants(spec, parent, d.profile, d.device, d.space, imp, d.limits)
        t2 = time.perf_counter() - t
        kept = lambda f: f"{f.start.importance:.3f}" if f.start else f.verdict  # noqa: E731
        print(f"{name}: one assessment {t1:.2f} s (kept {kept(one)}); sweep of {len(swept.rows)} variants "
              f"{t2:.2f} s (kept {kept(swept.feasibility)}; {swept.variant.label()})")


if __name__ == "__main__":
    main(sys.argv[1:])
