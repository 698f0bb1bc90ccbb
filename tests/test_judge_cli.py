"""`python app.py label --annotator judge`: an endpoint judge over loopback HTTP and a local judge model (a folder or a
GGUF file), bad input in one line with the store unchanged, and the key never written anywhere."""

import json

import pytest
import torch

from app.commands.cli import main
from labeling.judges.judge import JudgeTemplate, Status, judge_queue, parse_verdict
from storage import Store
from storage.judge_verdicts import list_verdicts
from tests.judge_server import JudgeServer, prefers_word
from trainers.models.judge_model import LocalJudge, read_next_token


@pytest.fixture
def queued(store, queue_pairs):
    ids = queue_pairs([("p1", "good answer", "bad answer"), ("p2", "poor", "good one"), ("p3", "x", "y")])
    store.close()
    return store.path, ids


def test_label_with_an_endpoint_judge(queued, capsys):
    db, ids = queued
    with JudgeServer(prefers_word("good")) as server:
        code = main(["label", "--db", str(db), "--annotator", "judge", "--judge", server.url, "--judge-model", "fake",
                     "--n", "5"])
    out = capsys.readouterr().out
    assert code == 0 and "judge fake judged 3 pairs: 3 verdicts (3 train)" in out and "queue ran out" in out
    verdicts = {v.pair_id: v for v in list_verdicts(Store(db))}
    assert [verdicts[i].outcome.value for i in ids] == ["first", "second", "tie"]


def test_suggest_only_verdicts_train_nothing(queued, capsys):
    db, _ = queued
    with JudgeServer(prefers_word("good")) as server:
        assert main(["label", "--db", str(db), "--annotator", "judge", "--judge", server.url, "--judge-model", "fake",
                     "--n", "2", "--suggest-only"]) == 0
    assert "2 verdicts (0 train)" in capsys.readouterr().out
    assert not any(v.trains for v in list_verdicts(Store(db)))


def test_the_key_is_never_written_to_the_store_logs_audit_or_exports(queued, tmp_path, monkeypatch, capsys):
    db, _ = queued
    secret = "sk-cli-secret-abcdef0123456789"
    monkeypatch.setenv("MY_JUDGE_KEY", secret)
    with JudgeServer(prefers_word("good")) as server:
        assert main(["label", "--db", str(db), "--annotator", "judge", "--judge", server.url, "--judge-model", "fake",
                     "--judge-key-env", "MY_JUDGE_KEY", "--n", "3"]) == 0
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {secret}"
    out = tmp_path / "export.jsonl"
    assert main(["export", "--db", str(db), "--format", "soft", "--out", str(out)]) == 0
    assert main(["audit", "--db", str(db), "--out", str(tmp_path / "audit.csv")]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {row["annotator"] for row in rows} == {"judge:fake"}  # verdicts that train export under the judge's name
    printed = capsys.readouterr()
    assert secret not in printed.out + printed.err
    assert "MY_JUDGE_KEY" in (tmp_path / "audit.csv").read_text()  # the variable's name is recorded, not its value
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("extra, message", [
    ([], "needs --judge"),
    (["--judge", "http://127.0.0.1:9/v1"], "--judge-model"),
    (["--judge", "http://127.0.0.1:9/v1", "--judge-model", "m", "--judge-key-env", "UNSET_JUDGE_VAR"],
     "UNSET_JUDGE_VAR holds no key"),
    (["--judge", "no/such/folder"], "no judge model at no/such/folder"),
    (["--judge", "http://127.0.0.1:9/v1", "--judge-model", "m", "--min-confidence", "2"], "--min-confidence"),
    (["--judge", "http://127.0.0.1:9/v1", "--judge-model", "m", "--judge-template", "missing.md"],
     "cannot read the judge template"),
])
def test_bad_judge_options_are_one_line_and_leave_no_store(tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.delenv("UNSET_JUDGE_VAR", raising=False)
    db = tmp_path / "new.db"
    assert main(["label", "--db", str(db), "--annotator", "judge", "--n", "1", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and not db.exists()


SHORT = JudgeTemplate.parse("## system\nJudge: {guidelines}\n## user\n{question}\nA: {answer_a}\nB: {answer_b}")


def test_a_local_judge_model_folder_labels_the_queue(store, queue_pairs, tiny_qwen_dir):
    queue_pairs([("p1", "good answer", "bad answer"), ("p2", "poor", "good one")])
    judge = LocalJudge.load(tiny_qwen_dir, store.data_dir / "judges")
    assert judge.name == "qwen" and sorted(judge.letter_ids) == ["A", "B", "C"]
    run = judge_queue(store, judge, SHORT, n=5, trains=True)
    assert run.judged == 2 and run.counts["error"] == 0
    for verdict in list_verdicts(store):  # a random tiny model: whatever it says is read, or counted unparseable
        assert verdict.status in ("ok", "unparseable")
        for order in verdict.orders:
            assert order["probs"] is None or abs(sum(order["probs"].values()) - 1) < 1e-6


def test_the_verdict_is_the_likeliest_letter_while_the_letters_hold_enough_probability():
    letters = {"A": 5, "B": 6, "C": 7}
    logits = torch.full((10,), -5.0)
    logits[6], logits[5], logits[0] = 3.0, 2.0, 3.5  # token 0 is likelier, but the letters hold 55%
    reply = read_next_token(logits, letters, lambda ids: f"tok{ids[0]}")
    assert reply.text.startswith("[[B]]") and reply.probs["B"] > reply.probs["A"] > reply.probs["C"]
    assert parse_verdict(reply.text).letter == "B" and abs(sum(reply.probs.values()) - 1) < 1e-6
    logits[0] = 9.0  # the model would write something else: the letters hold under 10%, so no verdict
    reply = read_next_token(logits, letters, lambda ids: f"tok{ids[0]}")
    assert reply.text.startswith("[[tok0") and reply.probs is None and parse_verdict(reply.text).letter is None


def test_a_gguf_judge_is_converted_once_into_the_data_folder(store, queue_pairs, tiny_gguf):
    queue_pairs([("p1", "a", "b")])
    judge = LocalJudge.load(tiny_gguf, store.data_dir / "judges")
    assert judge.name == "tiny-llama" and (store.data_dir / "judges" / "tiny-llama" / "config.json").is_file()
    run = judge_queue(store, judge, SHORT, n=1)
    assert run.judged == 1 and run.counts[Status.ERROR] == 0


def test_a_prompt_longer_than_the_judge_reads_is_an_error_counted(store, queue_pairs, tiny_qwen_dir):
    queue_pairs([("p1", "a", "b")])
    run = judge_queue(store, LocalJudge.load(tiny_qwen_dir, store.data_dir / "judges"), JudgeTemplate.load(), n=1)
    assert run.counts["error"] == 1
    assert "over the judge's context of 256" in list_verdicts(store)[0].orders[0]["excerpt"]


def test_label_with_a_local_judge_folder_on_the_demo_store(demo_store, tiny_qwen_dir, tmp_path, capsys):
    template = tmp_path / "short.md"
    template.write_text("## system\nJudge: {guidelines}\n## user\n{question}\nA: {answer_a}\nB: {answer_b}\n")
    demo_store.close()
    assert main(["label", "--db", str(demo_store.path), "--annotator", "judge", "--judge", str(tiny_qwen_dir),
                 "--judge-template", str(template), "--n", "3"]) == 0
    assert "judge qwen judged 3 pairs" in capsys.readouterr().out
    verdicts = list_verdicts(Store(demo_store.path), "qwen")
    assert len(verdicts) == 3 and all(v.status in ("ok", "unparseable") for v in verdicts)
