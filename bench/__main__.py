"""python -m bench: the main job. Its sections run in order; each prints a table and its notes,
and all of them go into one JSON file (bench/harness.py says how to add a section)."""
from bench import budget, calls, recompute
from bench import compile as compile_time
from bench.harness import main_job

SECTIONS = [recompute.SECTION, compile_time.SECTION, budget.SECTION, calls.SECTION]

main_job(SECTIONS, doc=recompute.__doc__)
