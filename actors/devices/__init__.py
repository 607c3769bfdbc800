"""The device hub actor (R39; docs/HANDS.md): `actor.py` is the shell around `hub.DeviceHub`, the jobs, the journal and the keeper."""
