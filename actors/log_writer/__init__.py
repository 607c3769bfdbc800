"""The log writer actor (R4, R5): `actor.py` is the shell; its core is the chat folder (`actors.folder`)."""
