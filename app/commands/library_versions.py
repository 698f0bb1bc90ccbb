"""The installed training libraries against requirements.txt's lower bounds. An older transformers, TRL or peft
imports fine and then fails deep in a training phase (a TypeError in the middle of a loop), so the command line refuses
to start on one, in one line that names the package and the fix."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from storage.errors import StudioError

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements.txt"
CHECKED = ("transformers", "trl", "peft", "accelerate", "datasets")  # torch's pin picks a wheel; any build runs


class OutdatedLibrary(StudioError):
    """An installed library is outside the versions requirements.txt asks for."""


def outdated_libraries(requirements: Path = REQUIREMENTS) -> tuple[str, ...]:
    """'name version (needs spec)' for each `CHECKED` library whose installed version requirements.txt rules out
    (none without the file, as in an installed copy that has its own resolver's word for it)."""
    if not requirements.is_file():
        return ()
    found = []
    for line in requirements.read_text().splitlines():
        text = line.split("#")[0].strip()
        if not text or text.startswith("-"):
            continue
        requirement = Requirement(text)
        if requirement.name not in CHECKED:
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed is None or not requirement.specifier.contains(installed, prereleases=True):
            found.append(f"{requirement.name} {installed or 'not installed'} (needs {requirement.specifier})")
    return tuple(found)


def check_library_versions(requirements: Path = REQUIREMENTS) -> None:
    """Raise `OutdatedLibrary` naming every library requirements.txt rules out, and the command that fixes it."""
    if found := outdated_libraries(requirements):
        raise OutdatedLibrary(f"{', '.join(found)}: run `pip install -r requirements.txt` in this environment")
