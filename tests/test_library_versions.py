"""The command line refuses, in one line, to run on a training library older than requirements.txt allows (an old
transformers failed mid-loop with a TypeError), and ignores what it does not check (torch's pin picks a wheel)."""

from importlib import metadata

import pytest

from app.commands import library_versions
from app.commands.cli import main
from app.commands.library_versions import REQUIREMENTS, outdated_libraries


@pytest.fixture
def installed(monkeypatch):
    """Pretend versions: `installed["peft"] = "0.17.0"`, or None for a library that is not installed."""
    versions, real = {}, metadata.version

    def version(name):
        if name not in versions:
            return real(name)
        if versions[name] is None:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(library_versions.metadata, "version", version)
    return versions


def test_this_environment_meets_the_requirements():
    assert outdated_libraries(REQUIREMENTS) == ()


def test_an_old_or_missing_library_is_named_with_what_is_needed(tmp_path, installed):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("-r base.txt\n# comment\ntorch==0.1  # a pin: not checked\ntransformers>=5.24,<6\n"
                            "trl>=1.16,<2  # TRL\npeft>=0.21\ngradio>=99\n")
    installed.update(transformers="5.17.0", trl="1.16.0", peft=None, gradio="1.0")
    assert outdated_libraries(requirements) == ("transformers 5.17.0 (needs <6,>=5.24)",
                                                "peft not installed (needs >=0.21)")
    installed.update(transformers="6.0.0", peft="0.21.0+local")
    assert outdated_libraries(tmp_path / "missing.txt") == ()  # no file: nothing to say
    assert outdated_libraries(requirements) == ("transformers 6.0.0 (needs <6,>=5.24)",)


def test_the_command_line_refuses_in_one_line_and_writes_nothing(tmp_path, installed, capsys):
    installed["transformers"] = "5.17.0"
    db = tmp_path / "studio.db"
    assert main(["init", "--demo", "--db", str(db)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == ["error: transformers 5.17.0 (needs <6,>=5.24): run `pip install -r requirements.txt` in this "
                     "environment"]
    assert not db.exists()
