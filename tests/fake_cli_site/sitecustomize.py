"""A fake `everchat.actors.models.connect_cli` for every process of a test's `everchat`
(this folder goes first on PYTHONPATH): each call is appended as a JSON line to the file
named by EVERCHAT_TEST_CLI_CALLS, with the process id, and answers as the offline demo.
The subscription connection itself is not what these tests check: the settings reaching
it in each process are."""

import json
import os

_CALLS = os.environ.get("EVERCHAT_TEST_CLI_CALLS")

if _CALLS:
    from everchat.actors import models

    def connect_cli(cli, **kwargs):
        shown = {key: (str(value) if key == "state_dir" and value is not None else value)
                 for key, value in kwargs.items()}
        with open(_CALLS, "a", encoding="utf-8") as file:
            file.write(json.dumps({"pid": os.getpid(), "cli": cli, **shown}) + "\n")
        return models.DemoConnection()

    models.connect_cli = connect_cli
