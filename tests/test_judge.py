"""The judge (labeling.judges.judge, labeling.judges.judge_endpoint): strict parsing, both orders, confidence, failures
counted, an OpenAI-compatible endpoint over real HTTP on loopback, and verdicts kept apart from people's labels."""

import math

import pytest

from labeling.judges.judge import (
    JudgeTemplate,
    OrderAnswer,
    Reply,
    Status,
    combine,
    judge_pair,
    judge_queue,
    parse_verdict,
    read_reply,
)
from labeling.judges.judge_endpoint import EndpointClient, completions_url, verdict_probs
from labeling.queue.annotation import next_pair
from storage.errors import InvalidInput
from storage.judge_verdicts import list_verdicts, round_training_verdicts, status_counts
from storage.labels import training_labels
from storage.types import Outcome
from tests.helpers import label_pairs
from tests.judge_server import REFUSE, SLOW, JudgeServer, always, prefers_word

TEMPLATE = JudgeTemplate.load()


class Scripted:
    """A judge client answering from a list of replies, recording the prompts it was sent."""

    name = "scripted"

    def __init__(self, *replies: Reply):
        self.replies, self.sent = list(replies), []

    def complete(self, messages):
        self.sent.append(messages)
        return self.replies.pop(0)


@pytest.mark.parametrize("text, status, letter", [
    ("A is clearer. [[A]]", Status.OK, "A"),
    ("[[B]] ... final verdict: [[B]]", Status.OK, "B"),
    ("equal. [[C]]", Status.OK, "C"),
    ("A is better, so [[A]]. No wait, [[B]]", Status.UNPARSEABLE, None),
    ("Assistant A is better.", Status.UNPARSEABLE, None),
    ("[A]", Status.UNPARSEABLE, None),
    ("[[a]]", Status.UNPARSEABLE, None),
    ("I'm sorry, I can't compare these.", Status.REFUSAL, None),
])
def test_verdicts_are_parsed_strictly(text, status, letter):
    answer = parse_verdict(text)
    assert (answer.status, answer.letter) == (status, letter)


def test_both_orders_agreeing_give_their_outcome_with_full_confidence():
    client = Scripted(Reply("[[A]]"), Reply("[[B]]"))  # the first response wins in both orders
    verdict = judge_pair(client, TEMPLATE, "be kind", "Q?", "first text", "second text")
    assert (verdict.status, verdict.outcome, verdict.confidence) == (Status.OK, Outcome.FIRST, 1.0)
    shown_first = [m[-1]["content"].index("first text") < m[-1]["content"].index("second text") for m in client.sent]
    assert shown_first == [True, False]  # asked in both orders
    assert "be kind" in client.sent[0][0]["content"]  # the project's guidelines are in the judge's prompt


def test_a_judge_that_always_answers_a_yields_ties():
    verdict = judge_pair(Scripted(Reply("[[A]]"), Reply("[[A]]")), TEMPLATE, "", "Q", "x", "y")
    assert (verdict.outcome, verdict.confidence) == (Outcome.TIE, 0.0)


def test_a_tie_in_one_order_is_a_tie_backed_by_half():
    verdict = combine(OrderAnswer(Status.OK, "B"), OrderAnswer(Status.OK, "C"))
    assert (verdict.outcome, verdict.confidence) == (Outcome.TIE, 0.5)


def test_confidence_comes_from_the_verdict_probabilities_when_given():
    first = OrderAnswer(Status.OK, "A", {"A": 0.9, "B": 0.05, "C": 0.05})
    second = OrderAnswer(Status.OK, "B", {"A": 0.3, "B": 0.7, "C": 0.0})  # B is the pair's first here
    verdict = combine(first, second)
    assert verdict.outcome is Outcome.FIRST and math.isclose(verdict.confidence, (0.9 + 0.7) / 2)
    swapped = combine(OrderAnswer(Status.OK, "A", {"A": 0.6, "B": 0.3, "C": 0.1}),
                      OrderAnswer(Status.OK, "A", {"A": 0.8, "B": 0.1, "C": 0.1}))
    assert swapped.outcome is Outcome.TIE and math.isclose(swapped.confidence, (0.1 + 0.1) / 2)


def test_a_failed_order_fails_the_verdict_and_nothing_is_guessed():
    verdict = combine(OrderAnswer(Status.OK, "A"), read_reply(Reply("timed out", failure=Status.TIMEOUT)))
    assert (verdict.status, verdict.outcome, verdict.confidence) == (Status.TIMEOUT, None, None)


def test_a_template_file_is_checked(tmp_path):
    bad = tmp_path / "t.md"
    bad.write_text("## system\nJudge.\n## user\n{question} {answer_a}\n")
    with pytest.raises(InvalidInput, match=r"lacks \{answer_b\}"):
        JudgeTemplate.load(bad)
    with pytest.raises(InvalidInput, match="## system"):
        JudgeTemplate.parse("Judge these.\n{question} {answer_a} {answer_b}")
    good = JudgeTemplate.parse("## system\nRules: {guidelines}\n## user\nQ {question} A {answer_a} B {answer_b}")
    messages = good.messages("be brief", "{braces} stay", "a", "b")
    assert messages[0]["content"] == "Rules: be brief" and messages[1]["content"] == "Q {braces} stay A a B b"


def test_completions_url_accepts_a_base_or_the_full_url():
    assert completions_url("http://h:8000") == "http://h:8000/v1/chat/completions"
    assert completions_url("http://h:8000/v1/") == "http://h:8000/v1/chat/completions"
    assert completions_url("http://h/v1/chat/completions") == "http://h/v1/chat/completions"


def test_verdict_probabilities_are_read_at_the_last_verdict_token():
    tokens = [{"token": "So [[", "logprob": 0.0}, {"token": "B", "logprob": math.log(0.6), "top_logprobs": [
        {"token": "B", "logprob": math.log(0.6)}, {"token": "A", "logprob": math.log(0.2)},
        {"token": "C", "logprob": math.log(0.1)}, {"token": "the", "logprob": math.log(0.1)}]}, {"token": "]]"}]
    probs = verdict_probs(tokens)
    assert probs and math.isclose(probs["B"], 0.6 / 0.9) and math.isclose(probs["A"], 0.2 / 0.9)
    assert verdict_probs([{"token": "no verdict"}]) is None


def test_an_endpoint_judge_over_http_labels_the_queue_and_its_verdicts_train(store, queue_pairs):
    ids = queue_pairs([("p1", "a good one", "a bad one"), ("p2", "meh", "good stuff"), ("p3", "x", "y")])
    with JudgeServer(prefers_word("good"), logprobs=True, confidence=0.8) as server:
        client = EndpointClient(server.url, model="fake-judge")
        run = judge_queue(store, client, TEMPLATE, n=10, trains=True)
        sent = server.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["body"]["model"] == "fake-judge"
    assert sent["body"]["logprobs"] is True and "Authorization" not in sent["headers"]
    assert run.counts["ok"] == 3 and run.training == 3 and len(server.requests) == 6
    verdicts = {v.pair_id: v for v in list_verdicts(store, "fake-judge")}
    assert [verdicts[i].outcome for i in ids] == [Outcome.FIRST, Outcome.SECOND, Outcome.TIE]
    assert math.isclose(verdicts[ids[0]].confidence, 0.8)
    trained = {lp.pair_id: lp for lp in training_labels(store)}
    assert trained[ids[1]].annotator == "judge:fake-judge" and trained[ids[1]].outcome is Outcome.SECOND
    assert next_pair(store, "alice") is None  # pairs the judge labels for training leave people's queue
    assert round_training_verdicts(store, 0) == 3


def test_a_suggestion_never_takes_a_pair_from_people_nor_trains(store, queue_pairs):
    ids = queue_pairs([("p1", "good", "bad")])
    with JudgeServer(prefers_word("good")) as server:
        run = judge_queue(store, EndpointClient(server.url, model="fake-judge"), TEMPLATE, n=5)
    assert run.counts["ok"] == 1 and run.training == 0
    assert training_labels(store) == [] and round_training_verdicts(store, 0) == 0
    label_pairs(store, "alice", {ids[0]: Outcome.SECOND})  # the judge's verdict did not fill the pair's overlap
    assert [lp.annotator for lp in training_labels(store)] == ["alice"]


def test_a_persons_label_wins_over_a_training_verdict(store, queue_pairs):
    ids = queue_pairs([("p1", "good", "bad")])
    label_pairs(store, "alice", {ids[0]: Outcome.SECOND})
    with JudgeServer(prefers_word("good")) as server:
        judge_queue(store, EndpointClient(server.url, model="fake-judge"), TEMPLATE, n=5, trains=True)
    assert [(lp.annotator, lp.outcome) for lp in training_labels(store)] == [("alice", Outcome.SECOND)]
    assert round_training_verdicts(store, 0) == 0


def test_a_confidence_threshold_keeps_unsure_verdicts_out_of_training(store, queue_pairs):
    queue_pairs([("p1", "good", "bad"), ("p2", "x", "y")])  # p2: a tie backed by both orders, but unsure
    with JudgeServer(prefers_word("good"), logprobs=True, confidence=0.6) as server:
        run = judge_queue(store, EndpointClient(server.url, model="j"), TEMPLATE, n=5, trains=True,
                          min_confidence=0.7)
    assert run.counts["ok"] == 2 and run.training == 0 and next_pair(store, "alice") is not None


def test_a_timeout_and_a_refusal_are_counted_never_guessed(store, queue_pairs):
    queue_pairs([("p1", "slow", "x"), ("p2", "refuse", "x"), ("p3", "words", "x"), ("p4", "good", "x")])

    def answer(messages):
        user = messages[-1]["content"]
        return (SLOW if "slow" in user else REFUSE if "refuse" in user else "Both fine." if "words" in user
                else prefers_word("good")(messages))

    with JudgeServer(answer) as server:
        client = EndpointClient(server.url, model="j", timeout_s=0.3)
        run = judge_queue(store, client, TEMPLATE, n=10, trains=True)
    assert {k: v for k, v in run.counts.items() if v} == {"timeout": 1, "refusal": 1, "unparseable": 1, "ok": 1}
    assert status_counts(store)["j"] == {"ok": 1, "timeout": 1, "refusal": 1, "unparseable": 1, "error": 0,
                                         "trains": 1}
    failed = [v for v in list_verdicts(store) if v.status != "ok"]
    assert all(v.outcome is None and v.confidence is None and not v.trains for v in failed)
    assert "1 timeout, 1 refusal, 1 unparseable" in run.line()


def test_a_server_refusing_logprobs_is_asked_again_without(store, queue_pairs):
    queue_pairs([("p1", "good", "bad")])
    with JudgeServer(prefers_word("good"), refuse_logprobs=True) as server:
        run = judge_queue(store, EndpointClient(server.url, model="j"), TEMPLATE, n=1)
    assert run.counts["ok"] == 1 and [bool(r["body"].get("logprobs")) for r in server.requests] == [True, False, False]


def test_the_key_is_sent_from_the_environment_and_never_stored(store, queue_pairs, monkeypatch):
    secret = "sk-test-very-secret-0123456789"
    monkeypatch.setenv("JUDGE_TEST_KEY", secret)
    queue_pairs([("p1", "good", "bad")])
    with JudgeServer(always("[[A]]")) as server:
        client = EndpointClient(server.url, model="j", key_env="JUDGE_TEST_KEY")
        judge_queue(store, client, TEMPLATE, n=1, trains=True)
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {secret}"
    assert secret not in repr(client)
    store.close()
    for path in store.path.parent.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_an_unset_key_variable_is_one_clear_line(monkeypatch):
    monkeypatch.delenv("NO_SUCH_JUDGE_KEY", raising=False)
    with pytest.raises(InvalidInput, match="NO_SUCH_JUDGE_KEY holds no key"):
        EndpointClient("http://127.0.0.1:1/v1", model="j", key_env="NO_SUCH_JUDGE_KEY")
    with pytest.raises(InvalidInput, match="--judge-model"):
        EndpointClient("http://127.0.0.1:1/v1", model="")


def test_an_unreachable_endpoint_is_an_error_counted(store, queue_pairs):
    queue_pairs([("p1", "good", "bad")])
    with JudgeServer(always("[[A]]")) as server:
        url = server.url
    run = judge_queue(store, EndpointClient(url, model="j", timeout_s=2), TEMPLATE, n=1)
    assert run.counts["error"] == 1 and run.counts["ok"] == 0
