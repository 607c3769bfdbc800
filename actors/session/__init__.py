"""The one door every front end uses: the session (local, attached, remote)."""
