"""The planner actor (R13-R33): `actor.py` is the shell around `planning.Planning`, the prefix gate (R23) and the R24 check."""
