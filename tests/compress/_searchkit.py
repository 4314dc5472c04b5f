from autocompress.catalog.hardware import HARDWARE
from autocompress.cost.profile import load_profile
from autocompress.plan.derive import engine_limits
from autocompress.feasibility.objective import prior_importance
from autocompress.feasibility.metrics import Relaxation
from autocompress.search.tables import cost_tables
from autocompress.ir import MLP, Architecture, Attention, Block
from autocompress.plan.space import derive_space
from autocompress.lang.model import Bound, ParentRef, Spec, Target, Workload


def setup_tables(tpot: float = 5.6e-4):
    """A 6-layer parent; its TPOT is ~10% over the bound, and the engine step overhead alone is
    ~92% of the bound, so about half of the layers' time must go (``tpot``: another bound)."""
    parent = Architecture("llama", 4096, 256, 8, 32, True, (Block(Attention(8, 4, 32), MLP(512)),) * 6)
    wl = Workload("w", 1, "serve", 256, 64, 0.0, (Bound("tpot", "<=", tpot),))
    spec = Spec(ParentRef("alias", "x"), Target("rtx-5070", "vllm", "bf16", "bf16", 1, None), (wl,))
    dev = HARDWARE["rtx-5070"]
    prof = load_profile(None, dev, "vllm")
    space = derive_space(parent, "vllm", dev.kind)
    lim = engine_limits(spec, dev)
    imp = prior_importance(parent)
    relaxes = [Relaxation(parent, d, spec, prof, dev, space, imp, lim) for d in space.hidden_grid]
    return [cost_tables(r) for r in relaxes], relaxes[0]
