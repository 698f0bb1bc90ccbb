"""What only admins read in the Data tab (app/data/references_panel.py, app/data/project_panel.py): the prompts'
references (the verifiable answers: an annotator who saw one would label with it) and the folders on this machine (each
policy version's, the reward base, the model a project started from). An annotator reads how many references there are
and the versions' names; without --auth everyone administers. Handlers are called with a Store and a request, as the
Data tab's refresh calls them."""

from types import SimpleNamespace

from app.auth import Users
from app.context import Studio
from app.data.project_panel import show_project
from app.data.references_panel import show_references
from storage.policies import add_policy
from storage.prompts import NewPrompt, add_prompts
from storage.settings import REWARD_BASE_SETTING, set_setting

USERS = Users({"alice": "a", "owner": "o"}, frozenset({"owner"}))
OWNER, ALICE = SimpleNamespace(username="owner"), SimpleNamespace(username="alice")
ANSWER = "ANSWER-7f3e"
FOLDER = "/models/secret-sft-folder"


def project(store):
    add_prompts(store, [NewPrompt("What is 2 + 3?", reference={"answer": ANSWER}), NewPrompt("Say hi.")])
    root = add_policy(store, f"{FOLDER}/copy", round=0, note=f"SFT policy from {FOLDER}")
    add_policy(store, f"{FOLDER}-v1", parent_id=root, round=1, note="PPO, 10 iterations")
    set_setting(store, REWARD_BASE_SETTING, f"{FOLDER}-reward-base")


def shown_text(view) -> str:
    return repr(view.values())


def test_an_annotator_reads_no_reference_and_an_admin_reads_them_all(store):
    project(store)
    studio = Studio(store, USERS)
    hidden = show_references(studio, ALICE)
    assert ANSWER not in shown_text(hidden) and hidden.references == []
    assert hidden.reference_summary.startswith("**1** prompts carry a reference") and "only admins" in \
        hidden.reference_summary
    for admin, request in ((studio, OWNER), (Studio(store), None)):  # without --auth everyone administers
        shown = show_references(admin, request)
        assert [row[2:] for row in shown.references] == [["What is 2 + 3?", f'{{"answer": "{ANSWER}"}}']]


def test_an_annotator_reads_the_versions_but_no_folder(store):
    project(store)
    studio = Studio(store, USERS)
    hidden = show_project(studio, ALICE)
    assert FOLDER not in shown_text(hidden)
    assert hidden.project_summary.startswith("**SFT policy**: v0")
    assert [row[:4] for row in hidden.policies] == [["v1", 1, "v0", "PPO, 10 iterations"], ["v0", 0, "—", "—"]]
    for admin, request in ((studio, OWNER), (Studio(store), None)):
        shown = show_project(admin, request)
        assert f"`{FOLDER}/copy`" in shown.project_summary and f"`{FOLDER}-reward-base`" in shown.project_summary
        assert [row[3:] for row in shown.policies] == [["PPO, 10 iterations", f"{FOLDER}-v1"],
                                                       [f"SFT policy from {FOLDER}", f"{FOLDER}/copy"]]


def run_listener(http, fn_index: int, session: str) -> str:
    """Run a listener of the served page as the browser does (Gradio's queue), returning its output's JSON text."""
    joined = http.post("/gradio_api/queue/join", json={"data": [], "fn_index": fn_index, "session_hash": session,
                                                       "event_data": None, "trigger_id": None})
    assert joined.status_code == 200, joined.text
    with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as events:
        for line in events.iter_lines():
            if '"process_completed"' in line:
                return line
    raise AssertionError(f"listener {fn_index} never completed")


def test_no_listener_of_the_served_page_hands_an_annotator_a_reference_or_a_folder(store, serve_studio, tmp_path):
    import httpx

    from bench.studio_driver import hashed_auth_file

    project(store)
    users = hashed_auth_file(tmp_path / "users.txt", {"alice": "alice-pw", "owner": "owner-pw"}, admins={"owner"})
    app = serve_studio(store, users)
    without_inputs = {index: fn.name for index, fn in app.fns.items() if not fn.inputs and fn.fn is not None}
    assert {"show_references", "show_project"} <= set(without_inputs.values())  # the Data tab's refreshes
    seen = {}
    for name in ("alice", "owner"):
        http = httpx.Client(base_url=app.local_url.rstrip("/"), timeout=60)
        assert http.post("/login", data={"username": name, "password": f"{name}-pw"}).status_code == 200
        seen[name] = {fn: run_listener(http, index, f"{name}-{index}") for index, fn in without_inputs.items()}
    assert not [fn for fn, output in seen["alice"].items() if ANSWER in output or FOLDER in output]
    assert ANSWER in seen["owner"]["show_references"] and FOLDER in seen["owner"]["show_project"]
