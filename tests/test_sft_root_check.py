"""A new root is checked before it anchors: on the demo, SFT on one demonstration at the preset (a full fine-tune at
1e-3 for 6 epochs, as the Train tab's button runs it) is refused in one line before any job; an SFT that garbles the
policy (4 demonstrations at 1e-2) is registered as v0's child, not the root, with a warning (the command's output, the
job's warnings, the Train tab) saying why and how to make it the root anyway; `set-root vK` and the Train tab's Make
root (admins) do so; a healthy SFT still becomes the root."""

from types import SimpleNamespace

import gradio as gr
import pytest

from app.auth import Users
from app.context import Studio
from app.train import job_view, root_action, sft_action
from storage.audit import list_actions
from storage.demonstrations import NewDemonstration, add_demonstration
from storage.job_warnings import list_warnings
from storage.jobs import list_jobs
from storage.metrics import read_metrics
from storage.policies import list_policies, root_policy, trained_from
from storage.prompts import list_prompts
from tests.policy_helpers import cli
from trainers.policy.fluency import COLLAPSE_RATIO
from trainers.policy.sft_config import ROOT_CHECK_RULE

pytestmark = pytest.mark.usefixtures("one_thread")
WRITTEN = " a wonderful , moving film with brilliant acting and a great story . i loved every minute of it ."


def write(store, count: int) -> None:
    for prompt in list_prompts(store, heldout=False)[:count]:
        add_demonstration(store, NewDemonstration(prompt.id, WRITTEN, "alice", "written"))


def garbling_sft(store, capsys) -> str:
    """SFT on 4 demonstrations at 1e-2 (the preset's rate × 10), which garbles the demo policy."""
    write(store, 4)
    code = cli("sft", "--db", str(store.path), "--learning-rate", "1e-2")
    out = capsys.readouterr().out
    assert code == 0
    return out


def test_one_demonstration_at_the_demo_preset_is_refused_in_one_line_before_any_job(demo_store, capsys, monkeypatch):
    write(demo_store, 1)
    assert cli("sft", "--db", str(demo_store.path)) == 2
    err = capsys.readouterr().err
    assert "1 demonstration can train SFT, fewer than the 4 a full fine-tune as a new SFT policy needs" in err
    assert err.count("\n") == 1 and list_jobs(demo_store) == [] and len(list_policies(demo_store)) == 1
    studio = Studio(demo_store)
    monkeypatch.setattr(sft_action, "start_job", lambda *args: pytest.fail("no job may start"))
    with pytest.raises(gr.Error, match="fewer than the 4 a full fine-tune as a new SFT policy needs"):
        sft_action.api_start_sft(studio, "{}", None)
    assert cli("sft", "--db", str(demo_store.path), "--no-as-root") == 0  # a child of v0 may train on one
    assert list_policies(demo_store)[1].parent_id == list_policies(demo_store)[0].id


def test_a_garbling_sft_is_registered_but_not_made_the_root_with_a_warning(demo_store, capsys):
    out = garbling_sft(demo_store, capsys)
    base, sft = list_policies(demo_store)
    assert sft.parent_id == base.id and root_policy(demo_store, sft).id == base.id  # v0 stays the anchor
    assert sft.note.endswith("(not made the SFT policy: its fluency collapsed)")
    assert "warning: v1 was not made the SFT policy: its held-out fluency collapsed" in out
    assert f"python app.py set-root v1 --db {demo_store.path}" in out
    [job] = list_jobs(demo_store)
    [warning] = list_warnings(demo_store, job.id)
    assert warning.rule == ROOT_CHECK_RULE and "Make it the SFT policy" in warning.advice
    [ratio] = read_metrics(demo_store, job.id, names=["sft/root_check_ratio"])
    assert ratio["value"] > COLLAPSE_RATIO


def test_set_root_makes_it_the_root_anyway_and_refuses_in_one_line(demo_store, capsys):
    garbling_sft(demo_store, capsys)
    base, sft = list_policies(demo_store)
    assert cli("set-root", "v1", "--db", str(demo_store.path)) == 0
    assert "v1 is now the SFT policy" in capsys.readouterr().out
    assert root_policy(demo_store, list_policies(demo_store)[1]).id == sft.id
    assert trained_from(demo_store, sft.id) == base.id
    for arguments, message in [(["v1"], "v1 is already an SFT policy"), (["v7"], "no policy version 'v7'")]:
        assert cli("set-root", *arguments, "--db", str(demo_store.path)) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1


def test_the_train_tab_shows_the_warning_and_its_make_root_button_works_for_admins(demo_store, capsys):
    garbling_sft(demo_store, capsys)
    studio = Studio(demo_store, Users({"alice": "a", "owner": "o"}, frozenset({"owner"})))
    [job] = list_jobs(demo_store)
    status = job_view.job_view(studio, job).status
    assert "⚠ v1 was not made the SFT policy" in status and "Make it the SFT policy" in status
    with pytest.raises(gr.Error, match="only an admin"):
        root_action.on_make_root(studio, SimpleNamespace(username="alice"), "v1")
    made = root_action.on_make_root(studio, SimpleNamespace(username="owner"), " v1 ")
    assert made.startswith("v1 is now the SFT policy")
    assert list_policies(demo_store)[1].parent_id is None
    assert [a.detail for a in list_actions(demo_store) if a.action.value == "root_set"] == [{"version": "v1"}]


def test_a_healthy_sft_at_the_preset_is_checked_and_becomes_the_root(demo_store, capsys):
    write(demo_store, 8)
    assert cli("sft", "--db", str(demo_store.path)) == 0
    assert "warning" not in capsys.readouterr().out
    _, sft = list_policies(demo_store)
    assert sft.parent_id is None
    [job] = list_jobs(demo_store)
    [ratio] = read_metrics(demo_store, job.id, names=["sft/root_check_ratio"])  # the check ran, and passed
    assert 0.5 < ratio["value"] <= COLLAPSE_RATIO and list_warnings(demo_store, job.id) == []


def test_mean_nll_is_the_plain_per_token_nll_of_the_responses_batched_and_left_padded():
    import torch

    from tests.policy_helpers import make_policy, make_tokenizer
    from trainers.policy.fluency import mean_nll

    torch.manual_seed(0)
    policy, pad = make_policy().eval(), make_tokenizer().pad_token_id
    rows = [([5, 6, 7], [8, 9]), ([5], [10, 11, 12, 13]), ([4, 4, 4, 4, 4], [7]), ([3, 2], [6, 6, 6]), ([9], [9, 9])]
    total, tokens = 0.0, 0
    with torch.no_grad():
        for prompt, response in rows:  # one row at a time, no padding
            logprobs = torch.log_softmax(policy(torch.tensor([prompt + response])).logits[0, len(prompt) - 1:-1], -1)
            total -= logprobs.gather(-1, torch.tensor(response)[:, None]).sum().item()
            tokens += len(response)
    assert mean_nll(policy, rows, pad, batch=2) == pytest.approx(total / tokens, rel=1e-5)


def test_a_parent_without_stored_samples_writes_few_short_ones_in_one_batch_and_reads_its_nll_off_them(monkeypatch):
    """The check's cost on a fresh project (no sample of the parent stored): `GENERATED_PROMPTS` samples of at most
    `GENERATED_TOKENS` tokens, and the parent's NLL of them taken from the generation itself (no second pass), equal
    to what `mean_nll` measures."""
    import torch

    from tests.policy_helpers import make_policy, make_tokenizer
    from trainers.models.chat_format import ChatFormat
    from trainers.policy import fluency

    torch.manual_seed(0)
    policy, tokenizer = make_policy(), make_tokenizer()
    chat = ChatFormat.from_tokenizer(tokenizer, [tokenizer.eos_token_id])
    prompts = [f"the film number {i} was" for i in range(12)]
    calls = []
    real = policy.forward
    policy.forward = lambda *args, **kwargs: calls.append(kwargs["input_ids"].shape) or real(*args, **kwargs)
    rows, nll = fluency.sampled_rows(policy, tokenizer, chat, prompts, seed=3)
    assert len(rows) == fluency.GENERATED_PROMPTS < len(prompts) and fluency.GENERATED_TOKENS < fluency.CHECK_TOKENS
    assert all(0 < len(sample) <= fluency.GENERATED_TOKENS for _, sample in rows)
    assert len(calls) <= 1 + fluency.GENERATED_TOKENS  # one batch: the shared prompt ids, then a pass per token
    assert fluency.shared_prefix([prompt for prompt, _ in rows]) > 0  # mean_nll reads the shared prompt ids once
    assert nll == pytest.approx(fluency.mean_nll(policy.eval(), rows, tokenizer.pad_token_id), rel=1e-4)
    monkeypatch.setattr(fluency, "shared_prefix", lambda prompts: 0)  # every prompt read whole: the same NLL
    assert nll == pytest.approx(fluency.mean_nll(policy, rows, tokenizer.pad_token_id), rel=1e-4)
