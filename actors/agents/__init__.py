"""The agents actor (R38; docs/HANDS.md): `actor.py` is the shell."""
