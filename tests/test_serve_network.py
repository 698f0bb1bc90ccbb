"""Serving to a team: under a reverse proxy's root path (requests under it answer, logins go through the gate, the
page's config carries the public root) and over HTTPS with a self-signed certificate made here by `openssl`, every
session cookie then `Secure`."""

import shutil
import subprocess

import httpx
import pytest
from gradio_client import Client

from storage.labels import list_labels
from tests.helpers import hashed_auth_file

PASSWORDS = {"alice": "alice-pw", "owner": "owner-pw"}


@pytest.fixture
def users(tmp_path):
    return hashed_auth_file(tmp_path / "users.txt", PASSWORDS, admins={"owner"})


def test_the_studio_answers_under_its_root_path(store, queue_pairs, serve_studio, users):
    queue_pairs([("p", "a", "b")])
    url = serve_studio(store, users, root_path="/studio/").local_url.rstrip("/")  # as a proxy forwards it
    http = httpx.Client(base_url=url, timeout=30)
    assert http.get("/studio/config").status_code == 401
    assert http.post("/studio/login", data={"username": "alice", "password": "wrong"}).status_code == 400
    assert http.post("/studio/login", data={"username": "alice", "password": "alice-pw"}).status_code == 200
    config = http.get("/studio/config", headers={"X-Forwarded-Host": "labs.example.org", "X-Forwarded-Proto": "https"})
    assert config.status_code == 200 and config.json()["root"] == "https://labs.example.org/studio"
    assert http.get("/studio/config").json()["root"] == f"{url}/studio"
    page = http.get("/studio/")
    assert page.status_code == 200 and "<html" in page.text.lower()
    alice = Client(f"{url}/studio/", auth=("alice", "alice-pw"), verbose=False)
    shown = alice.predict("", api_name="/next_pair")
    alice.predict("", shown["pair_id"], "left", "v1", api_name="/submit_label")
    assert [label.annotator for label in list_labels(store)] == ["alice"]


def self_signed_certificate(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key (PEM), made by Debian's `openssl`."""
    openssl = shutil.which("openssl")
    assert openssl, "openssl is missing: install Debian's openssl (apt-get install -y openssl)"
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
    return str(cert), str(key)


def test_the_studio_serves_https_with_the_given_certificate(store, serve_studio, users, tmp_path):
    cert, key = self_signed_certificate(tmp_path)
    app = serve_studio(store, users, ssl_certfile=cert, ssl_keyfile=key)
    url = app.local_url.rstrip("/")
    assert url.startswith("https://")
    with pytest.raises(httpx.ConnectError):  # a certificate nobody vouches for is refused by default...
        httpx.get(f"{url}/config", timeout=30)
    http = httpx.Client(base_url=url, verify=cert, timeout=30)  # ...and trusted when given
    assert http.get("/config").status_code == 401
    login = http.post("/login", data={"username": "owner", "password": "owner-pw"})
    assert login.status_code == 200 and "secure" in login.headers["set-cookie"].lower()
    assert http.get("/config").status_code == 200
    plain = url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):  # nothing answers in plain HTTP
        httpx.get(f"{plain}/config", timeout=10)


def test_under_tls_every_session_cookie_is_secure(store, serve_studio, users, tmp_path):
    cert, key = self_signed_certificate(tmp_path)
    url = serve_studio(store, users, ssl_certfile=cert, ssl_keyfile=key).local_url.rstrip("/")
    http = httpx.Client(base_url=url, verify=cert, timeout=30)
    cookies = http.post("/login", data={"username": "owner", "password": "owner-pw"}).headers.get_list("set-cookie")
    assert cookies and all("; secure" in cookie.lower() for cookie in cookies), cookies  # never sent over plain http
    for cookie in cookies:  # whichever cookie is replayed alone, it authenticates over HTTPS
        name, token = cookie.split(";")[0].split("=", 1)
        assert httpx.get(f"{url}/config", cookies={name: token}, verify=cert, timeout=30).status_code == 200
    plain = serve_studio(store, users).local_url.rstrip("/")  # without TLS a browser needs the cookie without Secure
    cookies = httpx.post(f"{plain}/login", data={"username": "owner", "password": "owner-pw"},
                         timeout=30).headers.get_list("set-cookie")
    assert any("; secure" not in cookie.lower() for cookie in cookies), cookies
    proxied = httpx.post(f"{plain}/login", data={"username": "owner", "password": "owner-pw"}, timeout=30,
                         headers={"X-Forwarded-Proto": "https"})  # TLS ended by a proxy on this machine
    assert all("; secure" in cookie.lower() for cookie in proxied.headers.get_list("set-cookie"))
