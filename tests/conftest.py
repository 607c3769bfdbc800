"""Test-wide settings.

Hypothesis profiles: `default` for everyday runs; `mutants` (used by
tools/mutants.py) skips shrinking, since it only needs to know that a law failed.
"""

from __future__ import annotations

import os

from hypothesis import Phase, settings

settings.register_profile("default", print_blob=True)
settings.register_profile("mutants", phases=[Phase.explicit, Phase.reuse, Phase.generate], print_blob=False,
                           derandomize=True)  # a mutant is caught, or not, the same way every run
settings.load_profile(os.environ.get("EVERCHAT_HYPOTHESIS_PROFILE", "default"))
