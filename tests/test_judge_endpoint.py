"""The endpoint judge's HTTP (labeling.judges.judge_endpoint, labeling.judges.judge_http) against hostile servers on
loopback: a redirect is never followed (the key goes to no other port, no verdict is stored), a drip-fed answer fails
within the timeout, and an answer over the cap is refused in one line with memory bounded."""

import time
import tracemalloc

import pytest

from app.commands.cli import main
from labeling.judges.judge import Status
from labeling.judges.judge_endpoint import EndpointClient
from labeling.judges.judge_http import EndpointRefused
from storage import Store
from storage.judge_verdicts import list_verdicts
from tests.judge_server import HostileServer, dripping, redirecting, streaming, verdict_everywhere

ASK = [{"role": "user", "content": "Which is better? [[A]] or [[B]]"}]
SECRET = "sk-redirect-test-0123456789abcdef"


@pytest.fixture
def queued(store, queue_pairs):
    queue_pairs([("p1", "good answer", "bad answer"), ("p2", "poor", "good one")])
    store.close()
    return store.path


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_never_followed_and_the_key_goes_to_no_other_port(queued, monkeypatch, capsys, code):
    monkeypatch.setenv("REDIRECT_TEST_KEY", SECRET)
    with HostileServer(verdict_everywhere()) as other:
        elsewhere = f"{other.url}/chat/completions"
        with HostileServer(redirecting(code, elsewhere)) as endpoint:
            exit_code = main(["label", "--db", str(queued), "--annotator", "judge", "--judge", endpoint.url,
                              "--judge-model", "fake", "--judge-key-env", "REDIRECT_TEST_KEY", "--n", "2"])
    err = capsys.readouterr().err
    assert endpoint.requests[0]["headers"]["Authorization"] == f"Bearer {SECRET}"  # the endpoint named got it
    assert other.requests == []  # the port it pointed to received nothing, key or not
    assert exit_code == 2 and len(err.strip().splitlines()) == 1
    assert f"redirected (HTTP {code}) to {elsewhere}" in err and SECRET not in err
    assert list_verdicts(Store(queued)) == []  # no verdict, nor a failed one, was stored


@pytest.mark.parametrize("where", ["headers", "body", "body-until-close"])
def test_a_drip_fed_answer_fails_within_the_timeout_in_one_line(where):
    with HostileServer(dripping(where)) as server:
        client = EndpointClient(server.url, model="j", timeout_s=2)
        began = time.monotonic()
        reply = client.complete(ASK)
        took = time.monotonic() - began
    assert reply.failure is Status.TIMEOUT and reply.text == "no answer within 2 s"
    assert 1.9 <= took < 3.5, took  # one deadline for the request, not one per byte read
    assert len(server.requests) == 1  # a timeout is not retried


@pytest.mark.parametrize("announced", [True, False], ids=["content-length", "until-close"])
def test_an_answer_over_the_cap_is_refused_in_one_line_with_memory_bounded(announced):
    total = 50_000_000
    with HostileServer(streaming(total, announced)) as server:
        client = EndpointClient(server.url, model="j", max_mb=1)
        tracemalloc.start()
        try:
            with pytest.raises(EndpointRefused) as refused:
                client.complete(ASK)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert server.done.wait(10)  # the server gave up writing once the client hung up
    line = str(refused.value)
    assert "over 1 MB" in line and "--judge-max-mb" in line and len(line.splitlines()) == 1
    assert peak < 4_000_000, peak  # the client held about the cap, never the 50 MB answer
    assert server.sent < 20_000_000, server.sent  # what the cap read plus the sockets' buffers, not the whole answer


def test_an_answer_under_the_cap_is_read_and_the_cap_is_a_setting(queued, capsys):
    long_verdict = "Long reasoning. " * 40_000 + "[[A]]"  # a 640 KB answer, 0.7 MB as JSON
    with HostileServer(verdict_everywhere(long_verdict)) as server:
        assert EndpointClient(server.url, model="j").complete(ASK).text == long_verdict
        assert main(["label", "--db", str(queued), "--annotator", "judge", "--judge", server.url, "--judge-model",
                     "fake", "--judge-max-mb", "0.5", "--n", "2"]) == 2
    err = capsys.readouterr().err
    assert "over 0.5 MB" in err and len(err.strip().splitlines()) == 1
    assert list_verdicts(Store(queued)) == []


@pytest.mark.parametrize("given, message", [
    ({"--judge-max-mb": "-1"}, "--judge-max-mb) must be positive"),
    ({"--judge": "http://:8000/v1"}, "names no host"),
])
def test_a_bad_answer_cap_or_url_is_one_line_before_the_store_is_made(tmp_path, capsys, given, message):
    db = tmp_path / "new.db"
    options = {"--judge": "http://127.0.0.1:9/v1", "--judge-model": "m", **given}
    assert main(["label", "--db", str(db), "--annotator", "judge", "--n", "1", *sum(options.items(), ())]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and not db.exists()
