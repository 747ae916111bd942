"""python -m bench: the recompute-overhead benchmark (bench/recompute.py)."""
from bench.recompute import main

main()
