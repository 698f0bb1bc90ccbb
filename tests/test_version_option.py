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


@pytest.mark.parametrize("flag", ["--policy", "--norm-policy"])
def test_train_reward_names_its_versions_as_vk_and_refuses_an_unknown_one_before_any_job(demo_store, capsys, flag):
    from app.commands.cli import main
    from storage.jobs import list_jobs

    assert main(["train-reward", "--db", str(demo_store.path), flag, "v7"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{flag} v7: no such version (versions: v0 to v0); name one as vK, e.g. {flag} v0")
    assert len(err.splitlines()) == 1 and list_jobs(demo_store) == []


def test_train_reward_reads_its_versions_into_the_reward_settings(demo_store, capsys, monkeypatch):
    from app.commands.cli import main
    from storage.policies import list_policies
    from trainers.jobs import reward_job

    [v0] = list_policies(demo_store)
    seen = []

    def check_reward_inputs(store, config):  # the checks before any job row: stop there, the settings seen
        seen.append(config)
        raise InvalidInput("stopped here")

    monkeypatch.setattr(reward_job, "check_reward_inputs", check_reward_inputs)
    assert main(["train-reward", "--db", str(demo_store.path), "--policy", "v0", "--norm-policy", "v0"]) == 2
    assert (seen[0].init_policy_id, seen[0].policy_id) == (v0.id, v0.id)
    assert main(["train-reward", "--db", str(demo_store.path), "--init-policy-id", str(v0.id)]) == 2  # old spelling
    assert seen[1].init_policy_id == v0.id and "write --policy v0" in capsys.readouterr().err
