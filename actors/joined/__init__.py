"""A joined computer's actor (docs/HANDS.md §5, R39): `actor.py` runs this computer's jobs for a chat on another."""
