"""The command line: subcommands listed, documented in docs/commands.md, bad input exits 2 with one line, store
unchanged."""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.commands.cli import SUBCOMMANDS
from bench.studio_driver import free_port
from storage.errors import Conflict, InvalidInput

ROOT = Path(__file__).resolve().parent.parent


def run(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def test_help_lists_every_subcommand():
    result = run("--help")
    assert result.returncode == 0
    for name in SUBCOMMANDS:
        assert name in result.stdout


def test_building_every_subcommands_parser_loads_neither_torch_nor_gradio():
    """Every `python app.py ...` builds all the subcommands' parsers first: none may load torch, transformers or Gradio,
    or each command (and each of the tests' ~400 subprocesses) pays seconds before it starts."""
    probe = ("import sys\nfrom app.commands.cli import build_parser\nbuild_parser()\n"
             "print(' '.join(m for m in ('torch', 'transformers', 'gradio') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_export_models_quant_choices_are_the_gguf_writers():
    from app.commands.export_model_cli import QUANT_NAMES
    from trainers.export.gguf_file import QUANTS

    assert sorted(QUANT_NAMES) == sorted(QUANTS)


def test_every_subcommand_is_documented_in_the_commands_page():
    commands = (ROOT / "docs" / "commands.md").read_text()
    for name in SUBCOMMANDS:
        assert re.search(rf"python app\.py {name}\b", commands), f"docs/commands.md lacks `python app.py {name}`"


def test_import_prompts(tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\ntwo\none\n")
    result = run("import-prompts", "--db", str(tmp_path / "s.db"), str(prompts))
    assert result.returncode == 0, result.stderr
    assert "imported 2 prompts, skipped 1 duplicates" in result.stdout


def assert_clean_error(result, message):
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr


def test_bad_prompt_file_leaves_a_new_store_uncreated(tmp_path):
    db = tmp_path / "s.db"
    assert_clean_error(run("import-prompts", "--db", str(db), str(tmp_path / "nope.txt")), "does not exist")
    assert not db.exists()


def test_bad_prompt_file_leaves_the_store_unchanged(tmp_path):
    db = tmp_path / "s.db"
    good, bad = tmp_path / "good.txt", tmp_path / "bad.jsonl"
    good.write_text("kept\n")
    bad.write_text('{"prompt": "fine"}\n{oops\n')
    assert run("import-prompts", "--db", str(db), str(good)).returncode == 0
    before = db.read_bytes()
    assert_clean_error(run("import-prompts", "--db", str(db), str(bad)), "line 2: not valid JSON")
    assert db.read_bytes() == before


def test_unwritable_store_path(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    prompts = tmp_path / "p.txt"
    prompts.write_text("x\n")
    try:
        if os.access(locked, os.W_OK):  # root ignores permissions: use a path under a file instead
            target = prompts / "s.db"
            message = "does not exist"
        else:
            target = locked / "s.db"
            message = "not writable"
        assert_clean_error(run("import-prompts", "--db", str(target), str(prompts)), message)
    finally:
        locked.chmod(0o700)


def test_foreign_store_file(tmp_path):
    db = tmp_path / "s.db"
    db.write_text("hello")
    prompts = tmp_path / "p.txt"
    prompts.write_text("x\n")
    assert_clean_error(run("import-prompts", "--db", str(db), str(prompts)), "not a SQLite file")
    assert db.read_text() == "hello"


def test_port_in_use(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        served = run("serve", "--db", str(tmp_path / "s.db"), "--port", str(port), "--no-demo")
        assert_clean_error(served, "already in use")
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("args,message", [
    (["--auth", "missing-auth.txt"], "auth file missing-auth.txt does not exist"),
    (["--port", "70000"], "out of range"),
    (["--max-upload-mb", "0"], "--max-upload-mb 0 must be a positive number of megabytes"),
    (["--idle-timeout-min", "0"], "--idle-timeout-min 0 must be a positive number of minutes"),
    (["--login-backoff-max-s", "-1"], "--login-backoff-max-s -1 must be a positive number of seconds"),
    (["--root-path", "studio"], "--root-path 'studio' must be a URL path starting with `/`"),
    (["--ssl-certfile", "cert.pem"], "pass both --ssl-certfile and --ssl-keyfile"),
    (["--ssl-certfile", "cert.pem", "--ssl-keyfile", "key.pem"], "--ssl-certfile cert.pem does not exist"),
])
def test_serve_bad_options(tmp_path, args, message):
    port = ["--port", str(free_port())] if "--port" not in args else []
    assert_clean_error(run("serve", "--db", str(tmp_path / "s.db"), "--no-demo", *port, *args, cwd=tmp_path), message)


def test_serve_option_errors_say_what_is_wrong_with_the_option():
    """A taken port conflicts with what runs on the machine, a bad port or upload cap is a bad value; neither is the
    store being unavailable."""
    from app.door.server import check_port, check_upload_cap

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(Conflict, match="already in use; pass --port with a free port"):
            check_port("127.0.0.1", sock.getsockname()[1])
    with pytest.raises(InvalidInput, match="port 70000 is out of range"):
        check_port("127.0.0.1", 70000)
    with pytest.raises(InvalidInput, match="--max-upload-mb nan must be a positive number"):
        check_upload_cap(float("nan"))
