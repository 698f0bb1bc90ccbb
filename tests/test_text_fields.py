"""Text a person sends the served studio is Unicode (labeling/files/text_fields.py): a lone surrogate, which JSON
escapes (`"\\ud800"`) and a UTF-7 form carry, is refused in one line naming its field, nothing is stored, and no
traceback reaches the server's log: in every API endpoint's text parameters, inside a JSON object of settings and at the
login gate."""

import json

import httpx

from bench.studio_driver import hashed_auth_file
from labeling.files.text_fields import surrogate_field
from storage import jobs as job_rows
from storage.demonstrations import list_demonstrations
from storage.labels import list_labels
from storage.settings import get_setting

SURROGATES = ("\ud800", "a rationale \udcff", "\udfff")


def test_the_field_holding_a_lone_surrogate_is_named_wherever_it_is():
    assert surrogate_field({"annotator": "ada", "rationale": "why \udcff"}) == "rationale"
    assert surrogate_field({"judgement": {"strength": "much", "rationale": "\ud800"}}) == "judgement.rationale"
    assert surrogate_field({"settings": {"reward_functions": [{"name": "length"}, {"label": "\udfff"}]}}) == (
        "settings.reward_functions[1].label")
    assert surrogate_field({"settings": {"\ud800": 1}}) == "settings"  # a bad key names the object holding it
    assert surrogate_field({"text": "😀 a pair decodes whole", "n": 3, "none": None}) is None
    deep = value = []
    for _ in range(5000):  # deeper than any recursion would go
        value.append([])
        value = value[0]
    value.append("\ud800")
    assert surrogate_field({"deep": deep}).startswith("deep[0][0]")


def call(url: str, endpoint: str, *values) -> tuple[str, dict | list]:
    """Call an endpoint over HTTP as any client may, the JSON escaping what is not ASCII (gradio_client cannot send a
    lone surrogate); returns the event (`complete` or `error`) and its data."""
    sent = httpx.post(f"{url.rstrip('/')}/gradio_api/call{endpoint}", content=json.dumps({"data": list(values)}),
                      headers={"Content-Type": "application/json"})
    answer = httpx.get(f"{url.rstrip('/')}/gradio_api/call{endpoint}/{sent.json()['event_id']}", timeout=60).text
    event, data = (line.split(": ", 1)[1] for line in answer.strip().splitlines()[:2])
    return event, json.loads(data)


def refusal(url: str, endpoint: str, *values) -> str:
    event, data = call(url, endpoint, *values)
    assert event == "error", (endpoint, data)
    return data["error"]


def stand_in(parameter: dict):
    """A value of the parameter's type for an endpoint called with a lone surrogate in another of its parameters."""
    kind = parameter["python_type"]["type"]
    if kind.startswith("Literal"):
        return parameter["example_input"]
    return {"int": 1, "float": 1.0, "bool": False, "str": "x", "filepath": None}.get(kind)


def test_every_text_parameter_of_every_endpoint_refuses_a_lone_surrogate_naming_it(store, queue_pairs,
                                                                                   serve_studio, capfd):
    queue_pairs([("the movie was", " dull .", " fine .")])
    app = serve_studio(store)
    assert call(app.local_url, "/next_pair", "ada")[0] == "complete"
    guidelines, checked = get_setting(store, "guidelines"), []
    for endpoint, info in sorted(app.get_api_info()["named_endpoints"].items()):
        parameters = info["parameters"]
        for position, parameter in enumerate(parameters):
            if "str" not in parameter["python_type"]["type"]:
                continue
            values = [stand_in(p) for p in parameters]
            for text in SURROGATES:
                values[position] = text
                assert refusal(app.local_url, endpoint, *values).startswith(
                    f"{parameter['parameter_name']} holds a lone surrogate")
            checked.append(f"{endpoint}:{parameter['parameter_name']}")
    assert {"/submit_label:rationale", "/submit_demonstration:text", "/submit_ranking:rationale",
            "/save_queue_settings:guidelines", "/next_pair:annotator", "/note_settings:rationale",
            "/start_loop:config_json", "/import_preferences:source"} <= set(checked)
    assert list_labels(store) == [] and list_demonstrations(store) == [] and job_rows.list_jobs(store) == []
    assert get_setting(store, "guidelines") == guidelines
    logged = capfd.readouterr().err
    assert "UnicodeEncodeError" not in logged and "Traceback" not in logged


def test_a_lone_surrogate_escaped_inside_a_json_object_of_settings_is_refused_naming_the_setting(store, serve_studio,
                                                                                                 capfd):
    url = serve_studio(store).local_url
    for endpoint in ("/start_loop", "/start_sft"):
        sent = json.dumps({"seed": 3, "reward_functions": [{"name": "length", "label": "\udcff"}]})
        assert "\\udcff" in sent  # a JSON escape inside the text, decoded by the studio
        assert refusal(url, endpoint, sent).startswith("settings.reward_functions[0].label holds a lone surrogate")
    assert job_rows.list_jobs(store) == []
    assert "Traceback" not in capfd.readouterr().err


def test_a_login_form_carrying_a_lone_surrogate_is_refused_in_one_line(store, serve_studio, tmp_path, capfd):
    users = hashed_auth_file(tmp_path / "users.txt", {"ada": "ada-pw"})
    url = serve_studio(store, users).local_url.rstrip("/")
    for name, password in ((b"+2AA-", b"ada-pw"), (b"ada", b"+2AA-")):  # UTF-7 for "\ud800"
        body = (b"--XX\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\n" + name + b"\r\n"
                b"--XX\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\n" + password + b"\r\n--XX--\r\n")
        answer = httpx.post(f"{url}/login", content=body,
                            headers={"Content-Type": "multipart/form-data; boundary=XX; charset=utf-7"})
        field = "the user name" if name != b"ada" else "the password"
        assert answer.status_code == 400 and answer.json()["detail"].startswith(f"{field} holds a lone surrogate")
    assert httpx.post(f"{url}/login", data={"username": "ada", "password": "ada-pw"}).status_code == 200
    logged = capfd.readouterr().err
    assert "UnicodeEncodeError" not in logged and "Traceback" not in logged
