"""`--policy vK`: a command names a version as the Leaderboard does; the old spelling, a bare policy id, still works
with a note naming its vK; an unknown version is one line naming the versions there are."""

import pytest

from storage.errors import InvalidInput
from storage.policies import add_policy
from trainers.entry.version_option import version_id


@pytest.fixture
def three_versions(store):
    """v0, v1, v2 with ids 1, 2, 3."""
    return [add_policy(store, f"/models/p{k}", round=k) for k in range(3)]


def test_a_version_name_is_its_policy_id(store, three_versions, capsys):
    assert [version_id(store, name, "--policy") for name in ("v0", "v2", " V1 ")] == [1, 3, 2]
    assert version_id(store, None, "--policy") is None
    assert capsys.readouterr().err == ""


def test_a_bare_number_is_the_old_spelling_an_id_with_a_note(store, three_versions, capsys):
    assert version_id(store, "3", "--policy") == 3
    assert capsys.readouterr().err.strip() == ("note: --policy 3 is read as policy id 3, which is v2; write --policy "
                                               "v2 (a bare number is the old spelling)")


@pytest.mark.parametrize("text, line", [
    ("v3", "--policy v3: no such version (versions: v0 to v2); name one as vK, e.g. --policy v2"),
    ("7", "--policy 7: no policy id 7 (versions: v0 to v2); name a version as vK, e.g. --policy v2"),
    ("latest", "--policy latest: no such version (versions: v0 to v2); name one as vK, e.g. --policy v2"),
])
def test_an_unknown_version_is_one_line(store, three_versions, text, line):
    with pytest.raises(InvalidInput) as refused:
        version_id(store, text, "--policy")
    assert str(refused.value) == line


def test_no_version_in_an_empty_store(store):
    with pytest.raises(InvalidInput, match="the store holds no policy yet"):
        version_id(store, "v0", "--policy")
