"""Security: with --auth every route of the web server refuses anonymous requests (routes and endpoints enumerated
from the running app, not listed by hand), only admins start, stop or resume jobs (API and Train tab buttons alike),
no request reaches files outside what the studio hands out, an upload over the size cap is refused, the studio binds
to this machine by default and warns on other interfaces without --auth, and every error message shown in the
browser is escaped.

test_label_api covers the labeling side of --auth (labels only as yourself; imports, exports and guidelines for
admins); the real-browser test covers model output shown literally.
"""

import ast
import json
from pathlib import Path

import httpx
import psutil
import pytest
from gradio_client import Client, handle_file

from app.commands.cli import build_parser
from app.door.limits import MAX_UPLOAD_MB
from app.door.server import serve
from app.train import train_form
from bench.studio_driver import free_port, hashed_auth_file
from storage import jobs as job_rows
from storage.prompts import count_prompts
from storage.settings import set_setting

ROOT = Path(__file__).resolve().parent.parent
PASSWORDS = {"alice": "alice-pw", "owner": "owner-pw"}
# must never reach an anonymous caller
MARKERS = ("GUIDELINE-MARKER-7f3a", "PROMPT-MARKER-91c2", "RESPONSE-MARKER-5e0b")
# project settings an admin changes, each with arguments of the right shape
ADMIN_SETTINGS_CALLS = {"/gold_settings": ("{}",), "/lift_gold_flag": ("bob", True), "/mark_gold": (1,),
                        "/mark_gold_ranking": (1,), "/note_settings": ("optional", "off"),
                        "/overlap_training": ("majority",)}
ADMIN_ENDPOINTS = {"/start_loop", "/start_sft", "/stop_job", "/resume_job", "/import_prompts", "/import_preferences",
                   "/export_labels", "/save_queue_settings", "/export_audit", "/start_export", "/arena_votes_train",
                   *ADMIN_SETTINGS_CALLS}
SIGNED_IN_ENDPOINTS = {"/next_pair", "/submit_label", "/undo_label", "/job_status", "/metrics", "/annotator_stats",
                       "/leaderboard", "/judge_agreement", "/next_ranking", "/submit_ranking", "/undo_ranking",
                       "/submit_demonstration", "/undo_demonstration", "/gold_accuracy", "/judgement_notes",
                       "/arena_start", "/arena_answers", "/arena_vote", "/arena_standings"}
ADMIN_HANDLERS = {"on_start", "on_start_sft", "on_stop", "on_resume"}  # the Train tab's buttons (browser-only handlers)


@pytest.fixture
def users(tmp_path):
    """The auth file: alice annotates, owner is an admin (hashed passwords, as `add-user` writes them)."""
    return hashed_auth_file(tmp_path / "users.txt", PASSWORDS, admins={"owner"})


@pytest.fixture
def studio(store, queue_pairs, serve_studio, users):
    """The studio under --auth on a store holding recognisable text; returns (app, url)."""
    queue_pairs([(MARKERS[1], MARKERS[2], "another answer")])
    set_setting(store, "guidelines", MARKERS[0])
    app = serve_studio(store, users)
    return app, app.local_url.rstrip("/")


def signed_in(url: str, name: str) -> httpx.Client:
    http = httpx.Client(base_url=url, timeout=30)
    assert http.post("/login", data={"username": name, "password": PASSWORDS[name]}).status_code == 200
    return http


def fill(path: str, values: dict) -> str:
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    return path


def test_with_auth_no_route_answers_an_anonymous_caller_with_studio_data(studio, store):
    app, url = studio
    endpoints = sorted(app.get_api_info()["named_endpoints"])
    assert set(endpoints) == ADMIN_ENDPOINTS | SIGNED_IN_ENDPOINTS  # a new endpoint must be placed in one of the two
    anonymous = httpx.Client(base_url=url, timeout=3)
    body = {"data": ["alice"], "fn_index": 0, "session_hash": "x", "event_id": "x", "trigger_id": None}
    answers = {}
    for path, methods in app.server_app.openapi()["paths"].items():  # every route the web server answers
        names = [e.lstrip("/") for e in endpoints] if "{api_name}" in path else ["x"]
        for method in methods:
            for api_name in names:
                filled = fill(path, {"api_name": api_name, "path": str(store.path), "path_or_url": str(store.path),
                                     "size": "192", "url_path": url})
                filled = filled.replace("{", "").replace("}", "")  # any other parameter: a plausible word
                try:
                    response = anonymous.request(method.upper(), filled, json=body if method != "get" else None)
                except httpx.TimeoutException:  # an event stream that waits: it sent nothing
                    continue
                answers[(method, filled)] = response.status_code
                assert not any(marker in response.text for marker in MARKERS), (method, filled, response.text[:300])
    guarded_prefixes = ("/config", "/gradio_api/info", "/gradio_api/call/", "/gradio_api/run/", "/gradio_api/api/",
                        "/gradio_api/queue/", "/gradio_api/upload", "/gradio_api/file")
    guarded = [key for key in answers if key[1].startswith(guarded_prefixes)]
    assert len(guarded) >= 4 * len(endpoints) + 5
    assert {key: answers[key] for key in guarded if answers[key] != 401} == {}
    for index in app.fns:  # every event handler, the browser-only ones too, through the queue
        response = anonymous.post("/gradio_api/queue/join", json={**body, "fn_index": index})
        assert response.status_code == 401
    assert store.db().execute("SELECT count(*) FROM reservations").fetchone()[0] == 0


def test_only_admins_start_stop_or_resume_jobs(studio, store):
    app, url = studio
    alice = Client(url, auth=("alice", "alice-pw"), verbose=False)
    owner = Client(url, auth=("owner", "owner-pw"), verbose=False)
    settings_calls = ((args, endpoint) for endpoint, args in ADMIN_SETTINGS_CALLS.items())
    for args, endpoint in (((json.dumps({"rounds": 1}),), "/start_loop"), (("{}",), "/start_sft"), ((1,), "/stop_job"),
                           ((1,), "/resume_job"), *settings_calls):
        with pytest.raises(Exception, match="only an admin"):
            alice.predict(*args, api_name=endpoint)
    with pytest.raises(Exception, match="the store has no policy"):  # an admin passes the check, then meets the store's
        owner.predict(json.dumps({"rounds": 1}), api_name="/start_loop")
    with pytest.raises(Exception, match="job 1 does not exist"):
        owner.predict(1, api_name="/stop_job")

    http = signed_in(url, "alice")  # the Train tab's buttons, called the way the browser calls them
    handlers = {index: fn for index, fn in app.fns.items() if fn.name in ADMIN_HANDLERS}
    assert {fn.name for fn in handlers.values()} == ADMIN_HANDLERS
    for index, fn in handlers.items():
        data = ["demo", "{}", *train_form.fill_preset("demo")][:len(fn.inputs)]
        warnings, done = button_press(http, index, data, "s1")
        assert done["success"] is True and warnings == ["only an admin can do this; ask a user marked `admin` in "
                                                        "the auth file"], (fn.name, done)  # a refusal, not an error
    assert job_rows.list_jobs(store) == []


def button_press(http, index: int, data: list, session: str) -> tuple[list[str], dict]:
    """Call a button's handler as the browser does; returns the warnings it showed and its completion message."""
    event = http.post("/gradio_api/queue/join", json={"fn_index": index, "data": data, "session_hash": session,
                                                      "event_data": None, "trigger_id": None}).json()["event_id"]
    warnings = []
    with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
        for line in stream.iter_lines():
            message = json.loads(line[6:]) if line.startswith("data: ") and event in line else {}
            if message.get("msg") == "log" and message.get("level") == "warning":
                warnings.append(message["log"])
            if message.get("msg") == "process_completed":
                return warnings, message
    raise AssertionError("the event never completed")


def test_the_train_tab_start_button_works_for_an_admin(studio, store):
    app, url = studio
    http = signed_in(url, "owner")
    [index] = [i for i, fn in app.fns.items() if fn.name == "on_start" and fn.api_name == "on_start"]  # Start loop
    data = ["demo", '{"prompts_per_round": 5, "labels_per_round": 8}', *train_form.fill_preset("demo")]
    warnings, done = button_press(http, index, data, "s2")
    # the handler ran (it used to fail before reaching the studio's code) and met the store's check of the settings
    assert done["success"] is True and "the store has no policy" in warnings[0], done
    assert job_rows.list_jobs(store) == []


def test_requests_reach_no_file_the_studio_did_not_hand_out(studio, store, tmp_path):
    app, url = studio
    secret = store.data_dir / "secret.txt"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("data-folder file\n")
    owner = signed_in(url, "owner")
    for target in (store.path, secret, Path("/etc/passwd"), ROOT / "app.py"):
        for route in (f"/gradio_api/file={target}", f"/gradio_api/file/{target}"):
            response = owner.get(route)
            assert response.status_code in (403, 404), (route, response.status_code)
    prompts = count_prompts(store)
    for target in (secret, store.path, Path("/etc/hostname")):  # a server path posted where an upload belongs
        file_data = {"path": str(target), "meta": {"_type": "gradio.FileData"}}
        event = owner.post("/gradio_api/call/import_prompts", json={"data": [file_data, False]}).json()["event_id"]
        answer = owner.get(f"/gradio_api/call/import_prompts/{event}").text
        assert "event: error" in answer and "Imported" not in answer, answer
    assert count_prompts(store) == prompts
    info = app.get_api_info()["named_endpoints"]
    typed_paths = [(name, p["parameter_name"]) for name, endpoint in info.items() for p in endpoint["parameters"]
                   if p["component"] != "File" and any(w in p["parameter_name"] for w in ("path", "dir", "file"))]
    assert typed_paths == []  # no endpoint takes a typed path; files arrive only as uploads


def test_a_loop_config_cannot_name_code_to_run(studio, store):
    _, url = studio
    owner = Client(url, auth=("owner", "owner-pw"), verbose=False)
    with pytest.raises(Exception, match="oracle 'os:system' names code to run, which only the command line may do"):
        owner.predict(json.dumps({"oracle": "os:system"}), api_name="/start_loop")
    with pytest.raises(Exception, match="'os:system' names code to run, which only the command line may do"):
        owner.predict(json.dumps({"reward": "functions", "reward_functions": [{"name": "os:system"}]}),
                      api_name="/start_loop")
    assert job_rows.list_jobs(store) == []


def test_error_messages_reach_the_browser_escaped(studio):
    _, url = studio
    owner = Client(url, auth=("owner", "owner-pw"), verbose=False)
    with pytest.raises(Exception) as error:
        owner.predict(json.dumps({"<img src=x onerror=alert(1)>": 1}), api_name="/start_loop")
    assert "&lt;img src=x onerror=alert(1)&gt;" in str(error.value) and "<img" not in str(error.value)


def shown_message_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in
                ("Error", "Warning", "Info") and isinstance(node.func.value, ast.Name) and node.func.value.id == "gr"):
            yield node


def test_every_shown_message_is_a_fixed_text_or_escaped():
    """Gradio renders gr.Error/gr.Warning/gr.Info text as HTML: anything not fixed goes through user_message."""
    unescaped = []
    for module in sorted((ROOT / "app").rglob("*.py")):
        for call in shown_message_calls(ast.parse(module.read_text())):
            text = call.args[0] if call.args else None
            fixed = isinstance(text, ast.Constant) or (isinstance(text, ast.JoinedStr) and
                                                        all(isinstance(v, ast.Constant) for v in text.values))
            escaped = isinstance(text, ast.Call) and getattr(text.func, "id", None) == "user_message"
            if not (fixed or escaped):
                unescaped.append(f"{module.name}:{call.lineno}")
    assert unescaped == []


def parser_serve_defaults():
    return build_parser().parse_args(["serve"])


def listening_addresses(port: int) -> set[str]:
    return {c.laddr.ip for c in psutil.Process().net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def test_the_studio_binds_this_machine_by_default_and_warns_elsewhere_without_auth(store, users, capsys):
    host = parser_serve_defaults().host
    assert host == "127.0.0.1"
    for bind, auth, warned in ((host, None, False), ("0.0.0.0", None, True), ("0.0.0.0", users, False)):
        port = free_port()
        app = serve(store, host=bind, port=port, users=auth, block=False)
        try:
            assert listening_addresses(port) == {bind}
        finally:
            app.close()
        warning = capsys.readouterr().err
        assert ("warning: serving on 0.0.0.0 without --auth" in warning) is warned, warning


def test_an_upload_over_the_size_cap_is_refused_and_nothing_is_imported(store, tmp_path, serve_studio, users):
    assert parser_serve_defaults().max_upload_mb == MAX_UPLOAD_MB
    big, small = tmp_path / "big.txt", tmp_path / "small.txt"
    big.write_text("".join(f"prompt number {i}\n" for i in range(100)))  # 1,690 bytes
    small.write_text("one small prompt\n")
    url = serve_studio(store, users, max_upload_mb=1 / 1024).local_url.rstrip("/")  # 1 KB
    owner = Client(url, auth=("owner", "owner-pw"), verbose=False)
    with pytest.raises(ValueError, match="exceeds the maximum file size of 1024 bytes"):
        owner.predict(handle_file(str(big)), False, api_name="/import_prompts")
    raw = signed_in(url, "owner").post("/gradio_api/upload", files=[("files", ("big.txt", big.read_bytes()))])
    assert raw.status_code == 413 and "exceeded maximum allowed size of 1024 bytes" in raw.text, raw.text
    assert count_prompts(store) == 0
    assert "Imported 1 prompts" in owner.predict(handle_file(str(small)), False, api_name="/import_prompts")
    assert count_prompts(store) == 1
