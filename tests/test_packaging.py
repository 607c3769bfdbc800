"""The repository's folders install under the one `everchat.*` namespace."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = config["package-dir"]
    found = set()
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *parts)))
    assert found == listed


def test_the_console_script_runs_the_cli():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["project"]["scripts"]["everchat"] == "everchat.frontends.cli.main:main"
    from everchat.frontends.cli.main import main

    assert callable(main)


def _readme_commands() -> list[str]:
    """The indented command lines at the top of the README, before its first rule."""
    top = (ROOT / "README.md").read_text().split("\n---\n", 1)[0]
    return [line.strip() for line in top.splitlines() if line.startswith("    ")]


def test_the_readme_opens_with_the_chat_and_the_test_command_that_ci_runs():
    run_chat, run_tests = _readme_commands()
    assert run_chat.endswith("&& .venv/bin/everchat") and "pip install" in run_chat
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci_lines[-1] == run_tests


def test_bend_is_the_readable_model_not_a_python_package():
    """bend/ holds planner.bend and LAWS.bend (SPEC §8): nothing there is installed or imported."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "everchat.bend" not in config["package-dir"] and not list((ROOT / "bend").rglob("*.py"))
    assert (ROOT / "bend" / "planner.bend").is_file()
