"""The suite's processes collect garbage less often, and never scan what the imports made.

A test worker lives for the whole run and imports LangChain, LangGraph and pydantic: by the
end of collecting the whole suite it holds about 250,000 objects, and each full collection
scans them all again, though none of them ever becomes garbage. With CPython's default thresholds
(700, 10, 10) a worker of `tests/unit` ran about 5,800 collections, 15% of its CPU time
(`gc.callbacks`, in one process). Two settings, for the suite only (the package sets
none; no test may depend on when a cycle is freed without calling `gc.collect()` itself):

- `freeze()` once the imports are done (a worker after collection, a zygote before it forks):
  the objects alive then move to a permanent generation no collection scans. In a forked
  child they are also never written by the collector, so their pages stay shared.
- a first-generation threshold of 10,000 allocations instead of 700: fewer young
  collections, each a little longer, about the same garbage freed. Freeze and threshold
  together took the collector's time in `tests/unit` from 6.8 s to 1.6 s.
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 20, 20)


def tune() -> None:
    """Collect less often (this process and the children it forks)."""
    gc.set_threshold(*THRESHOLDS)


def freeze() -> None:
    """Free what is garbage now, then exclude everything alive from later collections."""
    gc.collect()
    gc.freeze()
