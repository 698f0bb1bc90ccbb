"""DPO: bad settings refused in one line, the soft-target loss against hand computations, TRL's trainer fed the chat
format's ids (one end-of-turn, no added EOS), ties, metrics, a stop within one step, resume, LoRA's reference, the
`dpo` job and command on imported preferences; the tiny models and helpers are test_ppo's."""

import inspect
import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import AutoModelForCausalLM

from storage.jobs import claim_job, create_job, get_job, list_jobs
from storage.metrics import read_metrics
from storage.policies import list_policies
from storage.preferences import Preference, import_preferences
from tests.policy_helpers import PROMPTS, CancelAt, cli, make_policy, make_tokenizer
from trainers.jobs.layer import StoreReporter
from trainers.models.chat_format import ChatFormat
from trainers.models.loading import load_chat_format, load_policy, load_tokenizer
from trainers.policy.dpo import (
    StudioDPOTrainer,
    TargetCollator,
    last_complete_checkpoint,
    preference_rows,
    sample_steps,
    train_dpo,
    training_arguments,
)
from trainers.policy.dpo_config import LOSS_TYPES, DPOConfig, DPOSetupError
from trainers.policy.dpo_math import soft_preference_loss
from trainers.reporting import JobCancelled
from trainers.reward.data import PreferenceExample

pytestmark = pytest.mark.usefixtures("one_thread")

GOOD, BAD = "great and good .", "bad and awful ."
METRICS = ["dpo/loss", "dpo/margin", "dpo/accuracy", "dpo/chosen_reward", "dpo/rejected_reward", "dpo/logp_chosen",
           "dpo/logp_rejected", "dpo/grad_norm", "dpo/learning_rate", "dpo/kl", "dpo/entropy", "dpo/response_length",
           "dpo/eos_rate"]


def examples(n: int = 8, ties: int = 0) -> list[PreferenceExample]:
    """n labels on PROMPTS preferring GOOD (every third stored second-first, target 0), then `ties` tied ones."""
    rows = [PreferenceExample(i, i, PROMPTS[i % len(PROMPTS)], *((BAD, GOOD, 0.0) if i % 3 == 2 else (GOOD, BAD, 1.0)))
            for i in range(n)]
    return rows + [PreferenceExample(n + i, n + i, PROMPTS[i % len(PROMPTS)], GOOD, "the plot was fine .", 0.5)
                   for i in range(ties)]


def small(**overrides) -> DPOConfig:
    settings = dict(batch_size=4, epochs=1, learning_rate=1e-2, warmup_ratio=0.0, sample_prompts=4, response_length=6,
                    save_every=2)
    return DPOConfig(**{**settings, **overrides})


def chat_of(tokenizer) -> ChatFormat:
    return ChatFormat.from_tokenizer(tokenizer, [tokenizer.eos_token_id])


def train(config: DPOConfig, data=None, policy=None, **kwargs):
    tokenizer = make_tokenizer()
    return train_dpo(config, policy or make_policy(), tokenizer, chat_of(tokenizer), data or examples(), **kwargs)


# ----- settings ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    ({"dpo_beta": 0.0}, "dpo_beta (DPO's β) must be a positive number, got 0.0"),
    ({"dpo_beta": -0.1}, "must be a positive number, got -0.1"),
    ({"dpo_beta": math.nan}, "must be a positive number, got nan"),
    ({"loss_type": "kto"}, "unknown DPO loss type 'kto'; use one of sigmoid, hinge, ipo"),
    ({"label_smoothing": 0.1}, "label_smoothing is read only by the robust, exo_pair, aot, aot_unpaired losses"),
    ({"loss_type": "robust", "label_smoothing": 0.5}, "the robust loss needs label_smoothing in [0, 0.5)"),
    ({"loss_type": "exo_pair"}, "the exo_pair loss needs label_smoothing in (0, 1)"),
    ({"train_ties": True, "loss_type": "hinge"}, "train_ties needs a loss in which a tie (p = 0.5) means something"),
    ({"batch_size": 0}, "batch_size must be at least 1"),
    ({"sample_evals": 0}, "sample_evals must be at least 1"),
    ({"epochs": 0}, "epochs and learning_rate must be positive"),
    ({"temperature": 0.0}, "temperature must be > 0"),
    ({"bf16": True}, "bf16 was requested but there is no GPU"),
])
def test_bad_settings_are_one_line_errors_naming_the_setting(overrides, message):
    with pytest.raises(DPOSetupError) as error:
        DPOConfig(**overrides).check()
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_unknown_setting_is_refused_by_name():
    with pytest.raises(Exception, match="unknown DPO setting 'beta'; see python app.py dpo --help"):
        DPOConfig.from_dict({"beta": 0.1})


def test_the_loss_types_are_exactly_trls():
    """TRL's DPOTrainer names its loss types in the error for an unknown one; the studio offers the same list."""
    from trl import DPOTrainer

    source = inspect.getsource(DPOTrainer._compute_loss)
    listed = re.search(r"Should be one of \[(.*?)\]", source, re.S).group(1)
    assert tuple(re.findall(r"'(\w+)'", listed)) == LOSS_TYPES


def test_samples_are_measured_evenly_spaced_the_last_after_the_final_step():
    assert sample_steps(10, 2) == {5, 10}
    assert sample_steps(3, 4) == {1, 2, 3}
    assert sample_steps(1, 2) == {1}


# ----- the loss with a per-example target --------------------------------------------------------------------------

def test_soft_sigmoid_loss_against_hand_computations():
    u, v = torch.tensor([1.0]), torch.tensor([-1.0])  # β(u - v) = 0.5 * 2 = 1
    one = soft_preference_loss(u, v, torch.tensor([1.0]), beta=0.5, loss_type="sigmoid")
    tie = soft_preference_loss(u, v, torch.tensor([0.5]), beta=0.5, loss_type="sigmoid")
    assert one.item() == pytest.approx(math.log(1 + math.exp(-1)))  # -log σ(1) = 0.3133
    assert tie.item() == pytest.approx(0.5 * math.log(1 + math.exp(-1)) + 0.5 * math.log(1 + math.exp(1)))  # 0.8133
    assert one.item() == pytest.approx(-F.logsigmoid(torch.tensor(1.0)).item())  # TRL's sigmoid loss at p = 1
    flipped = soft_preference_loss(v, u, torch.tensor([0.0]), beta=0.5, loss_type="sigmoid")
    assert flipped.item() == pytest.approx(one.item())  # p = 0 on (b, a) is p = 1 on (a, b)


def test_a_tie_is_least_when_both_responses_moved_alike():
    u = torch.tensor([0.3], requires_grad=True)
    loss = soft_preference_loss(u, torch.tensor([0.3]), torch.tensor([0.5]), beta=0.1, loss_type="sigmoid")
    loss.backward()
    assert loss.item() == pytest.approx(math.log(2)) and u.grad.item() == pytest.approx(0.0, abs=1e-7)


def test_soft_ipo_loss_against_hand_computations():
    u, v, lengths = torch.tensor([3.0]), torch.tensor([0.0]), (torch.tensor([1.0]), torch.tensor([1.0]))
    one = soft_preference_loss(u, v, torch.tensor([1.0]), beta=0.25, loss_type="ipo", lengths=lengths)
    tie = soft_preference_loss(u, v, torch.tensor([0.5]), beta=0.25, loss_type="ipo", lengths=lengths)
    assert one.item() == pytest.approx((3 - 1 / (2 * 0.25)) ** 2)  # TRL's ipo loss at p = 1: (3 - 2)^2 = 1
    assert tie.item() == pytest.approx(9.0)  # a tie's target is h = 0
    halved = soft_preference_loss(torch.tensor([4.0]), torch.tensor([1.0]), torch.tensor([0.5]), 0.25, "ipo",
                                  (torch.tensor([2.0]), torch.tensor([1.0])))
    assert halved.item() == pytest.approx(1.0)  # per token: 4/2 - 1/1 = 1
    with pytest.raises(ValueError, match="not 'hinge'"):
        soft_preference_loss(u, v, torch.tensor([0.5]), 0.1, "hinge")


# ----- what TRL's trainer trains on ---------------------------------------------------------------------------------

def record_training_forwards(model) -> list[dict]:
    """Every forward of `model` (and of copies made of it later) that computes label log-probs: its input ids,
    attention mask and labels."""
    seen = []

    def hook(module, args, kwargs):
        if kwargs.get("labels") is not None:
            seen.append({k: kwargs[k].detach().clone() for k in ("input_ids", "attention_mask", "labels")})

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def rows_of(batch: dict) -> list[tuple[list[int], list[int]]]:
    """(ids without padding, the ids whose log-probs count) of each row of a recorded forward."""
    out = []
    for ids, mask, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"], strict=True):
        n = int(mask.sum())
        out.append((ids[:n].tolist(), [int(t) for t in labels[:n] if t != -100]))
    return out


def test_dpo_trains_on_the_chat_formats_ids_each_response_closed_by_one_end_of_turn(tiny_qwen_dir):
    """Every training forward (policy and reference) reads prompt + response as the chat format renders them; the
    log-probs count the response ids, closed by the template's end-of-turn once (TRL would append EOS again)."""
    chat, tokenizer, policy = load_chat_format(tiny_qwen_dir), load_tokenizer(tiny_qwen_dir), load_policy(tiny_qwen_dir)
    conversation = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Review the movie."}]
    data = [PreferenceExample(1, 1, "the movie was", " great", " bad", 1.0),
            PreferenceExample(2, 2, conversation, "It is dull.", "A fine film.", 0.0),
            PreferenceExample(3, 3, "the plot", " is good", " is awful", 1.0),
            PreferenceExample(4, 4, conversation, "Great!", "Bad.", 1.0)]
    seen = record_training_forwards(policy)
    train_dpo(DPOConfig(batch_size=4, sample_prompts=2, sample_evals=1, response_length=4), policy, tokenizer, chat,
              data)
    prompts = [e.prompt for e in data]
    chosen = [e.first if e.target else e.second for e in data]
    rejected = [e.second if e.target else e.first for e in data]
    expected = {(tuple(seq), tuple(response)) for seq, response in
                zip(chat.sequences_ids(prompts * 2, chosen + rejected), chat.responses_ids(chosen + rejected),
                    strict=True)}
    assert len(seen) == 2  # one step: the policy's forward and the reference's
    for batch in seen:
        got = rows_of(batch)
        assert {(tuple(ids), tuple(counted)) for ids, counted in got} == expected
        for ids, counted in got:
            assert ids[-len(counted):] == counted  # the response is the row's end
            ends = [t for t in counted if t in chat.end_ids]
            assert ends == [chat.end_of_turn_id] and counted[-1] == chat.end_of_turn_id  # once, last
    assert chat.end_of_turn_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def response_logps(model, row: list[int], response: int) -> torch.Tensor:
    """Sum of the log-probs of the last `response` ids of `row` under `model`, computed directly."""
    ids = torch.tensor([row])
    logits = model(input_ids=ids).logits[0, :-1].float()
    logps = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
    return logps[-response:].sum()


def test_a_batch_with_ties_mixes_trls_loss_and_the_soft_loss_by_their_shares(tmp_path):
    """The loss of a batch of 2 strict pairs and 2 ties, against a reference unlike the policy, equals the mean of
    -log σ(β(u - v)) over the strict pairs and the p = 0.5 loss over the ties, from log-probs computed here."""
    tokenizer, policy, reference = make_tokenizer(), make_policy(seed=0), make_policy(seed=1)
    config = small(train_ties=True, dpo_beta=0.5)
    data = examples(2, ties=2)
    rows = preference_rows(chat_of(tokenizer), data)
    trainer = StudioDPOTrainer(model=policy, ref_model=reference, args=training_arguments(config, str(tmp_path), False),
                               data_collator=TargetCollator(pad_token_id=tokenizer.pad_token_id),
                               train_dataset=Dataset.from_list(rows),
                               processing_class=tokenizer)
    batch = TargetCollator(pad_token_id=tokenizer.pad_token_id)(rows)
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, dict(batch))
        ratios = []
        for row in rows:
            pair = []
            for side in ("chosen_ids", "rejected_ids"):
                sequence = row["prompt_ids"] + row[side]
                pair.append((response_logps(policy, sequence, len(row[side]))
                             - response_logps(reference, sequence, len(row[side]))).item())
            ratios.append(pair)
    u, v = (torch.tensor([r[k] for r in ratios]) for k in (0, 1))
    strict = -F.logsigmoid(0.5 * (u[:2] - v[:2])).mean()
    ties = soft_preference_loss(u[2:], v[2:], torch.tensor([0.5, 0.5]), 0.5, "sigmoid").mean()
    assert loss.item() == pytest.approx((strict + ties).item() / 2, rel=1e-4)
    assert ties.item() != pytest.approx(strict.item(), rel=1e-2)  # the two parts differ: the mix is tested


def test_sample_statistics_measure_the_policys_own_samples_against_the_reference():
    """KL 0 against itself (a copy, or LoRA's base with fresh adapters), positive against another model; length,
    EOS rate and entropy of the samples; the monitor scores their text."""
    import copy

    from trainers.policy.dpo_config import DPOConfig as Settings
    from trainers.policy.rollout import Sampling, sample_statistics
    from trainers.policy.setup import with_lora

    tokenizer, policy = make_tokenizer(), make_policy()
    chat, ids = chat_of(tokenizer), chat_of(tokenizer).prompts_ids(PROMPTS[:4])
    torch.manual_seed(0)
    same = sample_statistics(policy, chat, tokenizer.pad_token_id, ids, Sampling(6), reference=copy.deepcopy(policy),
                             score=lambda texts: [float(len(t.split())) for t in texts])
    assert same["kl"] == pytest.approx(0.0, abs=1e-6) and same["entropy"] > 0
    assert 1 <= same["response_length"] <= 6 and 0 <= same["eos_rate"] <= 1 and same["oracle_score"] >= 0
    torch.manual_seed(0)  # k1 of one sample may be negative: over 64 of them the mean is the KL, > 0
    assert sample_statistics(policy, chat, tokenizer.pad_token_id, ids * 16, Sampling(6), make_policy(seed=3))["kl"] > 0
    adapted = with_lora(make_policy(), Settings(lora=True))
    assert sample_statistics(adapted, chat, tokenizer.pad_token_id, ids, Sampling(6))["kl"] == pytest.approx(0.0,
                                                                                                            abs=1e-6)


# ----- training, reporting, stop, resume, LoRA -----------------------------------------------------------------------

def test_training_reports_every_metric_and_changes_the_weights(store):
    job_id = create_job(store, "dpo", {})
    claim_job(store, job_id, pid=1)
    policy = make_policy()
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    result = train(small(epochs=2), policy=policy, reporter=StoreReporter(store, job_id, phase="dpo"))
    assert result.steps == 4
    rows = read_metrics(store, job_id)
    assert {r["name"] for r in rows} >= set(METRICS)
    assert {r["step"] for r in rows if r["name"] == "dpo/kl"} == {2, 4}  # sample_evals = 2
    assert {r["step"] for r in rows if r["name"] == "dpo/loss"} == {1, 2, 3, 4}
    changed = [n for n, p in policy.named_parameters() if not torch.equal(p, before[n])]
    assert "transformer.wte.weight" in changed and len(changed) == len(before)
    assert get_job(store, job_id).phase == "dpo 4/4"
    assert result.metrics["dpo/kl"] > 0 and 0 <= result.metrics["dpo/eos_rate"] <= 1


def test_a_stop_ends_the_run_within_one_step_with_a_checkpoint_and_the_resumed_run_equals_an_uninterrupted_one(
        store, tmp_path):
    straight = train(small(epochs=3))
    job_id = create_job(store, "dpo", {})
    claim_job(store, job_id, pid=1)
    with pytest.raises(JobCancelled, match="stopped after 3 of 6 steps"):
        train(small(epochs=3), state_dir=tmp_path, reporter=StoreReporter(store, job_id,
                                                                           listener=CancelAt(store, job_id, 2)))
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-3")  # Stop during step 3: it ends there
    assert max(r["step"] for r in read_metrics(store, job_id)) == 3
    resumed = train(small(epochs=3), state_dir=tmp_path)
    assert resumed.steps == 6
    expected = straight.trainer.model.state_dict()
    for name, value in resumed.trainer.model.state_dict().items():
        assert torch.allclose(value, expected[name], atol=1e-6), name


def test_a_kill_resumes_from_the_newest_checkpoint_written_to_its_end(tmp_path):
    for step, complete in ((2, True), (4, True), (6, False)):  # killed while writing checkpoint-6
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-4")
    assert last_complete_checkpoint(tmp_path / "missing") is None and last_complete_checkpoint(None) is None


def test_lora_trains_adapters_only_and_a_carried_adapter_keeps_the_sft_base_as_reference(tmp_path):
    from trainers.jobs.policy_job import load_plan_models
    from trainers.policy.dpo import save_dpo_policy

    base_dir = tmp_path / "sft"
    make_policy().save_pretrained(base_dir)
    make_tokenizer().save_pretrained(base_dir)
    base = load_policy(base_dir)
    first = train(small(lora=True, learning_rate=5e-2), policy=load_policy(base_dir))
    save_dpo_policy(first, tmp_path / "v1")
    assert (tmp_path / "v1" / "adapter" / "adapter_config.json").is_file()
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "v1") is not None

    policy, reference, _, _ = load_plan_models(str(tmp_path / "v1"), None, lora=True, with_value_head=False)
    assert reference is None
    second = train(small(lora=True, learning_rate=5e-2), policy=policy)
    model = second.trainer.model
    assert list(model.peft_config) == ["default"]  # TRL's copy of the carried adapter is not the reference
    ids = torch.tensor([[3, 4, 7, 9, 0]])
    with torch.no_grad(), model.disable_adapter():
        assert torch.allclose(model(input_ids=ids).logits, base(input_ids=ids).logits, atol=1e-5)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)


# ----- the job and the command ---------------------------------------------------------------------------------------

DPO_SETTINGS = ["--batch-size", "4", "--epochs", "1", "--learning-rate", "1e-2", "--sample-prompts", "4",
                "--response-length", "6"]


@pytest.fixture
def preference_store(seeded_store, tmp_path):
    """The seeded store with an imported preference data set: 8 pairs preferring GOOD, as `prefs`."""
    path = tmp_path / "prefs.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "chosen": " " + GOOD, "rejected": " " + BAD}) + "\n"
                            for p in PROMPTS))
    assert cli("import-preferences", "--db", str(seeded_store.path), str(path), "--source", "prefs") == 0
    return seeded_store


def test_dpo_on_imported_preferences_registers_a_version_that_loads_as_a_causal_lm(preference_store, capsys):
    store = preference_store
    code = cli("dpo", "--db", str(store.path), "--source", "prefs", *DPO_SETTINGS)
    out = capsys.readouterr()
    assert code == 0, out.err
    [job] = list_jobs(store)
    assert job.kind == "dpo" and job.status.value == "completed" and job.config["source"] == "prefs"
    sft, trained = list_policies(store)
    assert (trained.parent_id, trained.round) == (sft.id, 1) and trained.note == "DPO, 2 steps on 8 labels"
    model = AutoModelForCausalLM.from_pretrained(trained.path)
    assert not torch.equal(model.transformer.wte.weight, load_policy(sft.path).transformer.wte.weight)
    assert json.loads((Path(trained.path) / "dpo_config.json").read_text())["steps"] == 2
    assert {r["step"] for r in read_metrics(store, job.id, names=["dpo/kl"])} == {1, 2}
    assert not (store.data_dir / "dpo" / f"job-{job.id}").exists()  # the resumable state is dropped
    assert "completed, 2 steps on 8 labels; registered policy v1\n" in out.out
    assert Path(trained.path).name.startswith("dpo-r1-")  # the folder named by what made it


def test_ties_are_left_out_and_counted_unless_trained(preference_store, capsys):
    store = preference_store
    import_preferences(store, [Preference("the movie was", " fine .", " fine and good .")], "ties", now=0.0)
    with store.write() as db:
        db.execute("UPDATE labels SET outcome = 'tie' WHERE annotator = 'ties'")
    assert cli("dpo", "--db", str(store.path), *DPO_SETTINGS) == 0
    assert "on 8 labels; left out: 1 ties" in capsys.readouterr().out
    assert cli("dpo", "--db", str(store.path), *DPO_SETTINGS, "--train-ties") == 0
    out = capsys.readouterr().out
    assert "on 9 labels; registered" in out
    tie_loss = read_metrics(store, list_jobs(store)[0].id, names=["dpo/tie_loss"])
    assert tie_loss and all(r["value"] > 0 for r in tie_loss)


def test_labels_too_long_for_the_policy_or_of_excluded_prompts_are_left_out_and_counted(preference_store, capsys):
    from storage.prompts import PromptSelection, list_prompts, set_excluded

    store = preference_store
    import_preferences(store, [Preference("the plot was", " great" * 30, " bad .")], "long", now=0.0)  # context 32
    [excluded] = [p for p in list_prompts(store) if p.text == PROMPTS[0]]
    set_excluded(store, PromptSelection(ids=(excluded.id,)))
    assert cli("dpo", "--db", str(store.path), *DPO_SETTINGS) == 0
    assert "on 7 labels; left out: 1 of excluded prompts, 1 too long for the policy; registered" in \
        capsys.readouterr().out


@pytest.mark.parametrize("arguments, message", [
    (["--dpo-beta", "0"], "dpo_beta (DPO's β) must be a positive number, got 0.0"),
    (["--dpo-beta", "-1"], "must be a positive number"),
    (["--loss-type", "kto"], "unknown DPO loss type 'kto'; use one of sigmoid"),
    (["--train-ties", "--loss-type", "hinge"], "train_ties needs a loss in which a tie"),
    (["--source", "nobody"], "no labels from source 'nobody'; the store's labels come from: prefs"),
    (["--response-length", "40"], "no label can train DPO, left out: 8 too long for the policy (its context of 32 "
                                  "with response_length 40); lower response_length"),
])
def test_bad_dpo_input_is_one_line_exit_2_and_writes_nothing(preference_store, capsys, arguments, message):
    store = preference_store
    code = cli("dpo", "--db", str(store.path), *DPO_SETTINGS, *arguments)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert list_jobs(store) == [] and len(list_policies(store)) == 1


def test_dpo_without_labels_and_ppo_with_algorithm_dpo_are_refused_in_one_line(seeded_store, capsys):
    assert cli("dpo", "--db", str(seeded_store.path), *DPO_SETTINGS) == 2
    err = capsys.readouterr().err
    assert "no labels to train DPO on (skips do not count)" in err and len(err.strip().splitlines()) == 1
    assert cli("ppo", "--db", str(seeded_store.path), "--algorithm", "dpo") == 2
    err = capsys.readouterr().err
    assert "DPO trains on the labelled pairs without a rollout, so it is its own command: python app.py dpo" in err
    assert len(err.strip().splitlines()) == 1 and list_jobs(seeded_store) == []


def test_a_stopped_dpo_job_resumes_from_the_command_line_to_the_end(preference_store):
    from dataclasses import asdict

    from storage.jobs import finish_job
    from storage.types import JobStatus
    from trainers.jobs.dpo_job import run_dpo, state_dir
    from trainers.policy.dpo_config import DPORun

    store = preference_store
    run = DPORun(policy_id=1, settings={"batch_size": 2, "epochs": 1, "save_every": 1, "sample_prompts": 2,
                                        "response_length": 6})
    job_id = create_job(store, "dpo", asdict(run))
    claim_job(store, job_id, pid=1)
    with pytest.raises(JobCancelled):
        run_dpo(store, run, job_id, listener=CancelAt(store, job_id, 1))
    assert last_complete_checkpoint(state_dir(store, job_id)).endswith("checkpoint-2")
    assert len(list_policies(store)) == 1  # nothing registered
    finish_job(store, job_id, JobStatus.CANCELLED)

    import_preferences(store, [Preference("the movie was", " great .", " awful .")], "later", now=0.0)
    assert cli("dpo", "--db", str(store.path), "--resume", str(job_id)) == 0  # on the 8 labels it started on
    assert get_job(store, job_id).status.value == "completed"
    assert sorted(r["step"] for r in read_metrics(store, job_id, names=["dpo/loss"])) == [1, 2, 3, 4]
    assert len(list_policies(store)) == 2 and not state_dir(store, job_id).exists()
    assert list_policies(store)[-1].note == "DPO, 4 steps on 8 labels"
