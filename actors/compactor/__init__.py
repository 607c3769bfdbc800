"""The compactor pool (R26-R31): `actor.py` is a worker's shell around `compaction`, its pure core."""
