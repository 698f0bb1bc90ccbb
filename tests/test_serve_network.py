"""Serving to a team: under a reverse proxy's root path (requests under it answer, logins go through the gate, the
page's config carries the public root), over HTTPS with a self-signed certificate made here by `openssl` (every
session cookie then `Secure`), and restarted on its port at once after a crash left a connection in TIME-WAIT."""

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from gradio_client import Client

from bench.studio_driver import free_port, hashed_auth_file
from storage.labels import list_labels
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parent.parent
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


def serve_process(db: Path, port: int, log) -> subprocess.Popen:
    """`python app.py serve` on `port`, its output in the file `log`; returned once it answers."""
    process = subprocess.Popen([sys.executable, "app.py", "serve", "--db", str(db), "--no-demo", "--port", str(port)],
                               cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def answers() -> bool:
        assert process.poll() is None, f"serve exited {process.returncode}: {Path(log.name).read_text()[-1000:]}"
        try:
            return httpx.get(f"http://127.0.0.1:{port}/config", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(answers, timeout=180, every=0.2)
    return process


def test_serve_killed_with_a_client_connected_restarts_on_its_port_at_once(tmp_path):
    port, db = free_port(), tmp_path / "studio.db"
    with open(tmp_path / "first.log", "w") as first_log, open(tmp_path / "second.log", "w") as second_log:
        first = serve_process(db, port, first_log)
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # a kept-alive connection
        assert client.recv(64).startswith(b"HTTP/1.1 200")
        first.kill()  # as a crash: the server's end of the connection stays in the kernel (TIME-WAIT) once...
        first.wait(timeout=30)
        killed = time.monotonic()
        while client.recv(65536):  # ...the client has read all it was sent and closes in turn
            pass
        client.close()
        waiting = [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port]
        # for 60 s the kernel keeps it (with the start-up probe's own connection too, when the server closed that first)
        assert waiting and {c.status for c in waiting} == {psutil.CONN_TIME_WAIT}
        restarted = time.monotonic()
        second = serve_process(db, port, second_log)  # as a supervisor restarts it: at once, and it serves
        second.kill()
        second.wait(timeout=30)
    assert restarted - killed < 5 and "already in use" not in Path(second_log.name).read_text()
