"""Auth files of hashed passwords: the scrypt entry format, constant-time checks that cost the same for unknown names,
`add-user` and `hash-auth` from the command line, plain-text files refused, and a running studio's re-reading."""

import base64
import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app import passwords
from app.auth import add_user, hash_auth_file, read_auth_file
from app.passwords import DEFAULT_COST, ScryptCost, hash_password, parse_entry, verify_password
from bench.studio_driver import TEST_SCRYPT_COST, free_port, hashed_auth_file
from storage.errors import InvalidInput

ROOT = Path(__file__).resolve().parent.parent
FAST = TEST_SCRYPT_COST


def run_cli(*args, stdin: str = ""):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], input=stdin, capture_output=True, text=True,
                          env=env, timeout=120)


def test_an_entry_is_scrypt_with_its_cost_salt_and_hash_in_base64():
    entry = hash_password("correct horse", FAST)
    scheme, n, r, p, salt, key = entry.split("$")
    assert (scheme, int(n), int(r), int(p)) == ("scrypt", FAST.n, FAST.r, FAST.p)
    expected = hashlib.scrypt(b"correct horse", salt=base64.b64decode(salt), n=FAST.n, r=FAST.r, p=FAST.p, dklen=32)
    assert base64.b64decode(key) == expected
    assert hash_password("correct horse", FAST) != entry  # a fresh salt each time
    assert verify_password("correct horse", entry) and not verify_password("correct hors", entry)
    assert DEFAULT_COST == ScryptCost(2**14, 8, 1) and DEFAULT_COST.memory_bytes == 16 * 2**20
    assert hash_password("x").split("$")[1:4] == ["16384", "8", "1"]


@pytest.mark.parametrize("entry,problem", [
    ("scrypt$16384$8$1$c2FsdA==", "not a `scrypt$N$r$p$salt$hash` entry"),
    ("scrypt$1000$8$1$c2FsdA==$a2V5", "N must be a power of two"),
    ("scrypt$16$8$1$not base64!$a2V5", "base64"),
    ("scrypt$1048576$8$1$c2FsdA==$a2V5", "needs 1024 MB"),
])
def test_a_malformed_entry_is_refused_before_any_hashing(entry, problem):
    with pytest.raises(ValueError, match=problem.replace("$", r"\$")):
        parse_entry(entry)


def counting_hashes(monkeypatch) -> list:
    """Replace scrypt by a recording wrapper; returns the list of costs it was called with."""
    calls = []
    real = passwords._derive

    def derive(password, salt, cost):
        calls.append(cost)
        return real(password, salt, cost)

    monkeypatch.setattr(passwords, "_derive", derive)
    return calls


def test_an_unknown_name_costs_one_hash_at_the_files_cost_like_a_wrong_password(tmp_path, monkeypatch):
    users = read_auth_file(hashed_auth_file(tmp_path / "u.txt", {"alice": "a-pw", "owner": "o-pw"}).path)
    calls = counting_hashes(monkeypatch)
    assert users.verify("alice", "a-pw") and not users.verify("alice", "wrong") and not users.verify("mallory", "x")
    assert calls == [FAST, FAST, FAST]
    assert not users.verify("mallory", "")  # the dummy entry matches no password, not even an empty one


def test_add_user_writes_hashes_admins_and_a_private_file(tmp_path):
    path = tmp_path / "users.txt"
    assert add_user(path, "alice", "alice-pw", cost=FAST) is True
    assert add_user(path, "owner", "owner-pw", admin=True, cost=FAST) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == ["alice", "owner"]
    assert lines[1].endswith(":admin") and "owner-pw" not in path.read_text()
    users = read_auth_file(path)
    assert users.verify("owner", "owner-pw") and users.is_admin("owner") and not users.is_admin("alice")
    inode = path.stat().st_ino
    assert add_user(path, "alice", "new-pw", cost=FAST) is False  # replaced in place, as a new file
    assert path.stat().st_ino != inode and len(path.read_text().splitlines()) == 2
    assert read_auth_file(path).verify("alice", "new-pw") and not read_auth_file(path).verify("alice", "alice-pw")
    for name in ("", "a:b", " bob", "#bob", "x" * 65):
        with pytest.raises(InvalidInput, match="is not allowed"):
            add_user(path, name, "pw", cost=FAST)
    with pytest.raises(InvalidInput, match="the password is empty"):
        add_user(path, "bob", "", cost=FAST)


def test_the_add_user_command_reads_the_password_twice_from_stdin(tmp_path):
    path = tmp_path / "users.txt"
    result = run_cli("add-user", "--auth", str(path), "owner", "--admin", stdin="s3cret:pw\ns3cret:pw\n")
    assert result.returncode == 0, result.stderr
    assert "added admin owner" in result.stdout
    assert read_auth_file(path).verify("owner", "s3cret:pw") and read_auth_file(path).is_admin("owner")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_bytes()
    for stdin, problem in (("one\ntwo\n", "the two passwords differ"), ("\n\n", "the password is empty")):
        result = run_cli("add-user", "--auth", str(path), "owner", stdin=stdin)
        [line] = result.stderr.strip().splitlines()
        assert result.returncode == 2 and line.startswith(f"error: {problem}; nothing was written"), result.stderr
    assert path.read_bytes() == before


def test_hash_auth_converts_a_plain_file_in_place_keeping_admins_and_comments(tmp_path):
    path = tmp_path / "users.txt"
    path.write_text("# the team\nalice:alice-pw\n\nowner:owner-pw:admin\n")
    with pytest.raises(InvalidInput, match=r"plain-text passwords; hash them in place with `python app.py hash-auth"):
        read_auth_file(path)
    result = run_cli("hash-auth", str(path))
    assert result.returncode == 0 and "hashed 2 plain-text passwords" in result.stdout, result.stderr
    lines = path.read_text().splitlines()
    assert lines[0] == "# the team" and lines[2] == "" and lines[1].startswith("alice:scrypt$16384$8$1$")
    assert lines[3].startswith("owner:scrypt$") and lines[3].endswith(":admin")
    users = read_auth_file(path)
    assert users.verify("alice", "alice-pw") and users.verify("owner", "owner-pw") and users.admins == {"owner"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert hash_auth_file(path) == 0 and path.read_text().splitlines() == lines  # already hashed: unchanged


def test_serve_refuses_a_plain_text_auth_file_with_one_line_naming_hash_auth(tmp_path):
    path = tmp_path / "users.txt"
    path.write_text("alice:alice-pw\n")
    result = run_cli("serve", "--db", str(tmp_path / "s.db"), "--no-demo", "--port", str(free_port()),
                     "--auth", str(path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: auth file {path} holds plain-text passwords; hash them in place with `python app.py hash-auth {path}`"]
    assert not (tmp_path / "s.db").exists()


def test_a_malformed_line_is_named_without_echoing_secrets(tmp_path):
    path = tmp_path / "users.txt"
    path.write_text("alice:scrypt$16$1$1$c2FsdA==$a2V5\nbob:scrypt$16$1$1$c2FsdA==$a2V5:owner\n")
    with pytest.raises(InvalidInput, match=r"line 2: expected `name:HASH` or `name:HASH:admin`") as error:
        read_auth_file(path)
    assert "a2V5" not in str(error.value)


def test_a_running_studio_rereads_the_auth_file_and_keeps_the_last_good_one(tmp_path, capsys):
    auth = hashed_auth_file(tmp_path / "users.txt", {"alice": "a-pw", "owner": "o-pw"}, admins={"owner"})
    assert auth.verify("alice", "a-pw") and auth.is_admin("owner")
    hashed_auth_file(auth.path, {"alice": "new-pw", "bob": "b-pw"}, admins={"bob"})
    assert auth.verify("alice", "new-pw") and not auth.verify("alice", "a-pw") and auth.verify("bob", "b-pw")
    assert auth.is_admin("bob") and not auth.is_admin("owner") and "owner" not in auth.users().entries
    auth.path.write_text("alice:plain\n")  # a hand edit gone wrong: the studio keeps who it had
    assert auth.verify("bob", "b-pw")
    assert "plain-text passwords" in capsys.readouterr().err
    auth.path.unlink()
    assert auth.verify("bob", "b-pw")
    assert "does not exist" in capsys.readouterr().err
