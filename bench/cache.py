"""What the disk cache's safety checks cost (issue 21).

    python bench/cache.py                      # this checkout
    python bench/cache.py --against OTHER      # and a checkout without them (e.g. the commit before),
                                               # alternating processes, 5 rounds

Per process, with an empty cache directory: the per-call time of a cached 8-element tk.jit function
(the fast path, which never enters cache.py), a module load through cache.py (write, check and run
a tiny generated module; then load it again from disk in the same process), the warm cache_dir()
lookup, and the one-time decision on a directory (create, check owner, modes and parents)."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import timeit


def measure() -> dict:
    import numpy as np

    import tracekern as tk
    from tracekern.backends import cache

    res = {}
    x = np.linspace(0, 1, 8)
    f = tk.jit(lambda x: np.tanh(x) * 2 + 1)
    f(x)
    n = 20000
    res["call_us"] = min(timeit.repeat(lambda: f(x), number=n, repeat=5)) / n * 1e6
    sources = [f"VALUE = {i}\n" for i in range(200)]
    t = timeit.default_timer()
    for s in sources:
        cache.load_module(s)
    res["module_first_load_us"] = (timeit.default_timer() - t) / len(sources) * 1e6
    cache._MODULES.clear()
    t = timeit.default_timer()
    for s in sources:
        cache.load_module(s)
    res["module_load_from_disk_us"] = (timeit.default_timer() - t) / len(sources) * 1e6
    res["cache_dir_us"] = min(timeit.repeat(cache.cache_dir, number=n, repeat=5)) / n * 1e6
    if hasattr(cache, "check_dir"):
        base = tempfile.mkdtemp()
        t = timeit.default_timer()
        for i in range(50):
            os.environ["TRACEKERN_CACHE_DIR"] = os.path.join(base, str(i), "cache")
            cache.cache_dir()
        res["decision_us"] = (timeit.default_timer() - t) / 50 * 1e6
    return res


def _child(tree: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYTHONPATH=tree, TRACEKERN_CACHE_DIR=os.path.join(d, "cache"))
        out = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        print(json.dumps(measure()))
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this": here}
    if argv[:1] == ["--against"]:
        trees["against"] = os.path.abspath(argv[1])
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(5 if len(trees) > 1 else 3):
        for name, tree in trees.items():
            runs[name].append(_child(tree))
    keys = list(runs["this"][0])
    print(f"{'':28}" + "".join(f"{name:>26}" for name in trees))
    for k in keys:
        cells = []
        for name in trees:
            vals = [r[k] for r in runs[name] if k in r]
            cells.append(f"{statistics.median(vals):10.2f} ({min(vals):.2f}-{max(vals):.2f})" if vals else "-")
        print(f"{k:28}" + "".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main(sys.argv[1:])
