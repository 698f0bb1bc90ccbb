"""`python app.py init`: a project on the user's own chat model, with conversational prompts, held-out prompts and
guidelines; every bad input exits 2 with one line naming the path, and leaves no store behind."""

import json
import shutil
import sqlite3

import pytest

from app.commands.cli import main
from labeling.queue.annotation import queue_settings
from storage import Store
from storage.policies import list_policies
from storage.prompts import list_prompts
from trainers.models.chat_format import ChatFormat

CHAT = [{"role": "system", "content": "Answer in one line."}, {"role": "user", "content": "hello world"}]


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def write_prompts(path, rows):
    path.write_text("".join(json.dumps({"prompt": row}) + "\n" for row in rows))
    return path


def test_init_starts_a_project_with_conversations_heldout_prompts_and_guidelines(capsys, tmp_path, tiny_qwen_dir):
    prompts = write_prompts(tmp_path / "train.jsonl", [CHAT, "plain text prompt", [{"role": "user", "content": "hi"}]])
    heldout = write_prompts(tmp_path / "heldout.jsonl", [[{"role": "user", "content": "held out"}]])
    (tmp_path / "guide.md").write_text("# Prefer short, **kind** answers\n")
    code, out, err = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(tiny_qwen_dir),
                         "--prompts", str(prompts), "--heldout", str(heldout),
                         "--guidelines", str(tmp_path / "guide.md"))
    assert (code, err) == (0, "")
    assert "3 prompts, 1 held out" in out and "prompts fit 232 tokens (the context of 256 less 24" in out
    store = Store(tmp_path / "p.db")
    [policy] = list_policies(store)
    assert policy.path == str(tiny_qwen_dir.resolve()) and policy.note == f"SFT policy from {tiny_qwen_dir.resolve()}"
    train = list_prompts(store, heldout=False)
    assert [p.content for p in train] == [CHAT, "plain text prompt", [{"role": "user", "content": "hi"}]]
    assert [p.content for p in list_prompts(store, heldout=True)] == [[{"role": "user", "content": "held out"}]]
    assert queue_settings(store).guidelines == "# Prefer short, **kind** answers\n"
    assert store.db()["generations"].count == 0  # no demo anywhere


def test_the_old_policy_flag_still_starts_a_project_and_names_model(capsys, tmp_path, tiny_qwen_dir):
    """`init --policy MODEL` was the model's flag before `--model` (`--policy` takes a version, vK, elsewhere)."""
    code, out, err = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--policy", str(tiny_qwen_dir))
    assert code == 0 and "project started" in out
    assert err.strip() == f"note: init --policy is now --model: python app.py init --model {tiny_qwen_dir} ..."
    assert [p.path for p in list_policies(Store(tmp_path / "p.db"))] == [str(tiny_qwen_dir.resolve())]
    with pytest.raises(SystemExit):
        main(["init", "--help"])
    shown = capsys.readouterr().out
    assert "--model MODEL" in shown and "--policy" not in shown  # the old name works, and is not offered


def test_a_model_without_a_pad_token_is_fixed_in_a_copy_and_the_cli_says_so(capsys, tmp_path, tiny_llama_dir):
    code, out, _ = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(tiny_llama_dir))
    assert code == 0 and "reused its unused special token '<|reserved_special_token_0|>'" in out
    [policy] = list_policies(Store(tmp_path / "p.db"))
    assert policy.path.startswith(str(tmp_path / "p-data" / "models"))


@pytest.mark.parametrize("bad, message", [
    ("pickle_only", "--allow-pickle"),
    ("remote_code", "never runs code from a model folder"),
    ("encoder_only", "not a causal"),
    ("no_tokenizer", "tokenizer"),
    ("no_config", "config.json"),
    ("damaged_weights", "damaged_weights"),
    ("a_file", "a_file"),
    ("missing", "does not exist"),
])
def test_bad_model_folders_exit_2_with_one_line_naming_the_path_and_leave_no_store(capsys, tmp_path, bad_model_dirs,
                                                                                   bad, message):
    path = bad_model_dirs[bad]
    code, out, err = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert str(path) in err and message.lower() in err.lower()
    assert not (tmp_path / "p.db").exists() and not (tmp_path / "p-data").exists()


def test_a_pickle_only_model_is_converted_once_into_a_copy_with_allow_pickle(capsys, tmp_path, bad_model_dirs):
    code, out, _ = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(bad_model_dirs["pickle_only"]),
                       "--allow-pickle")
    assert code == 0 and "safetensors" in out
    [policy] = list_policies(Store(tmp_path / "p.db"))
    assert any(p.suffix == ".safetensors" for p in (tmp_path / "p-data" / "models").rglob("*"))
    assert policy.path.startswith(str(tmp_path / "p-data" / "models"))


def test_a_prompt_over_the_budget_is_kept_counted_and_named_and_a_trailing_answer_refused_by_line(capsys, tmp_path,
                                                                                                 tiny_qwen_dir):
    too_long = write_prompts(tmp_path / "long.jsonl", ["hello", "hello world " * 200])
    code, out, err = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(tiny_qwen_dir),
                         "--prompts", str(too_long))
    assert (code, err) == (0, "") and "2 prompts, 0 held out" in out
    assert ("1 of the 2 new prompts are longer than the policy reads (232 tokens: its context of 256 less 24 "
            "response tokens): prompts 2. They are kept") in out
    trailing = write_prompts(tmp_path / "answer.jsonl", [CHAT + [{"role": "assistant", "content": "an answer"}]])
    code, _, err = cli(capsys, "init", "--db", str(tmp_path / "q.db"), "--model", str(tiny_qwen_dir),
                       "--heldout", str(trailing))
    assert code == 2 and "line 1: the last turn is 'assistant'" in err
    assert not (tmp_path / "q.db").exists()


def test_init_refuses_a_store_that_holds_a_project_and_leaves_it_unchanged(capsys, tmp_path, tiny_qwen_dir):
    assert cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(tiny_qwen_dir))[0] == 0
    before = dump(tmp_path / "p.db")
    code, _, err = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(tiny_qwen_dir))
    assert code == 2 and "already holds a policy or prompts" in err
    assert dump(tmp_path / "p.db") == before


def dump(path) -> list[str]:
    """The store's whole content as SQL (the file's bytes change with every transaction's counter)."""
    with sqlite3.connect(path) as db:
        return list(db.iterdump())


def test_no_command_but_serve_seeds_the_demo(capsys, tmp_path):
    (tmp_path / "p.txt").write_text("my own prompt\n")
    code, out, _ = cli(capsys, "import-prompts", "--db", str(tmp_path / "p.db"), str(tmp_path / "p.txt"))
    assert code == 0 and "imported 1 prompts" in out
    store = Store(tmp_path / "p.db")
    assert [p.text for p in list_prompts(store)] == ["my own prompt"] and list_policies(store) == []


def test_a_two_round_loop_on_a_tiny_qwen2_chat_model_feeds_reward_training_and_ppo_the_same_chat_ids(
        capsys, tmp_path, tiny_qwen_dir, monkeypatch):
    """init -> conversational prompts -> `loop` (oracle labels) -> reward model -> PPO -> a new policy version, and the
    reward model reads each (prompt, response) with exactly the ids its training data had, whose prompt part is what
    PPO's rollouts were sampled from."""
    from trainers.policy.ppo import PPOTrainer
    from trainers.reward import data as reward_data
    from trainers.reward.scorer import RewardScorer

    prompts = write_prompts(tmp_path / "train.jsonl",
                            [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"hello {i}"}]
                             for i in range(12)])
    heldout = write_prompts(tmp_path / "heldout.jsonl", [[{"role": "user", "content": f"world {i}"}] for i in range(2)])
    db = str(tmp_path / "p.db")
    assert cli(capsys, "init", "--db", db, "--model", str(tiny_qwen_dir), "--prompts", str(prompts),
               "--heldout", str(heldout))[0] == 0

    def key(prompt, response):
        return json.dumps(prompt), response

    trained, scored, rollout_prompts = {}, {}, {}
    tokenize, raw_scores, score = reward_data.tokenize_examples, RewardScorer.raw_scores, PPOTrainer._score

    def spy_tokenize(chat, examples):
        dataset = tokenize(chat, examples)
        for example, row in zip(examples, dataset or [], strict=False):  # no dataset: no examples
            trained[key(example.prompt, example.first)] = row["prompt"] + row["responses"][0]
        return dataset

    def spy_raw_scores(self, prompts, responses):
        ids_of = self.chat.sequences_ids(list(prompts), list(responses))
        for prompt, response, ids in zip(prompts, responses, ids_of, strict=True):
            scored[key(prompt, response)] = ids
        return raw_scores(self, prompts, responses)

    def spy_score(self, prompts, responses, mask):
        for prompt in prompts:
            rollout_prompts[json.dumps(prompt)] = self.prompt_ids[self.prompts.index(prompt)]
        return score(self, prompts, responses, mask)

    monkeypatch.setattr("trainers.reward.trainer.tokenize_examples", spy_tokenize)
    monkeypatch.setattr(RewardScorer, "raw_scores", spy_raw_scores)
    monkeypatch.setattr(PPOTrainer, "_score", spy_score)
    config = {"oracle": "labeling.queue.synthetic:brevity_score", "prompts_per_round": 8, "samples_per_prompt": 2,
              "queue_reserve": 0, "reward_epochs": 2, "policy_iterations": 2, "policy_batch_size": 4,
              "policy_mini_batches": 2, "policy_epochs": 1, "response_length": 8}
    code, out, err = cli(capsys, "loop", "--db", db, "--rounds", "2", "--labels-per-round", "6", "--annotator",
                         "oracle", "--config", json.dumps(config))
    assert code == 0, err
    store = Store(db)
    policies = list_policies(store)
    assert [p.round for p in policies] == [0, 1, 2] and policies[2].parent_id == policies[1].id

    both = set(trained) & set(scored)
    assert both, "reward training and the reward scorer saw no (prompt, response) in common"
    assert all(trained[k] == scored[k] for k in both)
    assert rollout_prompts and all(json.loads(p)[0]["role"] == "system" for p in rollout_prompts)
    chat = ChatFormat.from_dir(tiny_qwen_dir)
    for prompt, prompt_ids in rollout_prompts.items():  # PPO scored these prompts: the RM read the same prompt ids
        assert prompt_ids == chat.prompt_ids(json.loads(prompt))  # the chat template, generation prompt included
        rm_ids = next(ids for (p, _), ids in scored.items() if p == prompt)
        assert rm_ids[:len(prompt_ids)] == prompt_ids and rm_ids[-1] == chat.end_of_turn_id


@pytest.mark.parametrize("field, value", [("max_position_embeddings", "64"), ("max_position_embeddings", 1e308),
                                          ("max_position_embeddings", 10**30), ("max_position_embeddings", True),
                                          ("n_positions", "64"), ("hidden_size", "64")])
def test_a_config_value_of_the_wrong_kind_exits_2_with_one_line_naming_it(capsys, tmp_path, tiny_qwen_dir, field,
                                                                          value):
    folder = tmp_path / "model"
    shutil.copytree(tiny_qwen_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, field: value}))
    prompts = write_prompts(tmp_path / "train.jsonl", ["hello"])
    code, out, err = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(folder), "--prompts",
                         str(prompts))
    assert (code, out, err.count("\n")) == (2, "", 1), err[-3000:]
    assert err.startswith(f"error: config.json in {folder}") and field in err
    assert not (tmp_path / "p.db").exists()


@pytest.mark.parametrize("template, message", [
    ("{{ messages[0].content.__class__.__mro__ }}", "access to attribute '__class__'"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "was stopped: it"),
    ("{{ 'x' * 100000 * 100000 }}", "10,000,000,000 characters"),
])
def test_a_hostile_chat_template_exits_2_with_one_line_and_leaves_no_store(capsys, tmp_path, tiny_qwen_dir, template,
                                                                           message):
    folder = tmp_path / "model"
    shutil.copytree(tiny_qwen_dir, folder)
    (folder / "chat_template.jinja").write_text(template)
    prompts = write_prompts(tmp_path / "train.jsonl", ["hello"])
    code, out, err = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(folder), "--prompts",
                         str(prompts))
    assert (code, out, err.count("\n")) == (2, "", 1), err[-3000:]
    assert err.startswith(f"error: {folder}: the model's chat template") and message in err
    assert not (tmp_path / "p.db").exists()
