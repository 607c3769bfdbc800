"""The turn runner actor (R34-R37): `actor.py` is the shell around `turn.TurnRunner`; goals and the after-turn command live beside it."""
