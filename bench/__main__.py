"""python -m bench: the main job. Its sections run in order; each prints a table and its notes,
and all of them go into one JSON file (see bench/harness.py to add a section)."""
from bench import recompute
from bench.harness import main_job
from bench.plot import plot

SECTIONS = [recompute.SECTION]
recompute.SECTION.plot = plot

main_job(SECTIONS, doc=recompute.__doc__)
