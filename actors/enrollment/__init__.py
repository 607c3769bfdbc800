"""Joining a computer to the chat (docs/HANDS.md §5): `actor.py` is the enrollment server and client."""
