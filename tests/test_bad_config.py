"""Bad loop settings sent to `/start_loop`: each gets one clear line naming the setting, and no job is created, no
worker started, nothing in the store changed.
"""

import json
from pathlib import Path

import pytest
from gradio_client import Client

from bench.studio_driver import launch_studio
from storage import Store
from storage import jobs as job_rows
from storage.policies import add_policy
from storage.prompts import add_prompts, count_prompts

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = 64  # the defaults (48 prompts per round, PPO batch 32) fit
DEMO_CONTEXT = 64  # n_positions of the demo policy (assets/demo_policy/config.json)


BAD = [
    ("{rounds: 3", "not valid JSON"),
    ('{"rounds": ' + "[" * 100_000, "nested too deeply"),
    ("[1, 2]", "must be a JSON object"),
    ('"rounds"', "must be a JSON object"),
    ('{"round": 3}', "unknown loop setting 'round'; known settings: rounds,"),
    ('{"rounds": "three"}', "loop setting 'rounds' must be int, got 'three'"),
    ('{"rounds": true}', "loop setting 'rounds' must be int"),
    ('{"rounds": null}', "loop setting 'rounds' must be int"),
    ('{"rounds": 0}', "rounds must be at least 1"),
    ('{"policy_lr": -0.001}', "policy_lr must be positive"),
    ('{"reward_lr": 0}', "reward_lr must be positive"),
    ('{"policy_lr": NaN}', "policy_lr must be a finite number"),
    ('{"response_length": 0}', "response_length must be at least 1"),
    ('{"samples_per_prompt": 1}', "samples_per_prompt must be at least 2"),
    (f'{{"policy_batch_size": {PROMPTS * 2}}}',
     f"policy_batch_size is {PROMPTS * 2} but only {PROMPTS} training prompts can be used"),
    (f'{{"prompts_per_round": {PROMPTS + 1}}}',
     f"prompts_per_round is {PROMPTS + 1} but only {PROMPTS} training prompts can be used"),
    ('{"policy_batch_size": 6, "policy_mini_batches": 4}', "policy_mini_batches (4) must divide policy_batch_size (6)"),
    ('{"top_p": 1.5}', "top_p must be in (0, 1]"),
    ('{"oracle_noise": -0.1}', "oracle_noise must be between 0 and 1"),
    ('{"target_kl": 0}', "target_kl must be positive or null"),
    ('{"kl_coef": -1}', "kl_coef must be 0 or more"),
    ('{"queue_reserve": -5}', "queue_reserve and kl_coef must be 0 or more"),
    ('{"selector": "best"}', "selector must be one of random, disagreement"),
    ('{"annotator": "robot"}', "annotator must be one of oracle, human"),
    ('{"selector": "disagreement", "ensemble": 1}', "needs an ensemble of 2 or more"),
    ('{"policy_lr": Infinity}', "policy_lr must be a finite number"),
    ('{"kl_coef": NaN}', "kl_coef must be a finite number"),
    (f'{{"response_length": {DEMO_CONTEXT * 10}}}', "response_length is 640 but the policy's context holds 64"),
    ('{"annotator": "human", "prompts_per_round": 2, "samples_per_prompt": 2, "labels_per_round": 50}',
     "labels_per_round is 50 but a round queues at most 2 pairs"),
    ('{"label_budget": 150, "labels_per_round": 50}', "give label_budget (the labels of the whole loop) or "
                                                       "labels_per_round (the first round's), not both"),
    ('{"label_budget": 2}', "label_budget must be at least 1 label per round (3), got 2"),
    ('{"label_budget": 0}', "label_budget must be at least 1 label per round (3), got 0"),
    ('{"label_budget": "150"}', "loop setting 'label_budget' must be int | None, got '150'"),
    ('{"label_budget": 2000}', "labels_per_round is 1439 but a round queues at most 288 pairs"),
]


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """A studio on a store with training prompts and a policy; yields (store, client, started). Jobs it starts are
    recorded in `started` and written to the store, but no worker is launched."""
    import app.train.train_tab

    store = Store(tmp_path_factory.mktemp("bad-config") / "studio.db")
    add_prompts(store, [f"Review {i}: the film" for i in range(PROMPTS)])
    add_policy(store, str(ROOT / "assets" / "demo_policy"), round=0, note="SFT")
    started = []

    def start_without_worker(store, kind, config, accelerate_config=None):
        started.append((kind, config))
        return job_rows.create_job(store, kind, config)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app.train.train_tab, "start_job", start_without_worker)
        blocks = launch_studio(store)
        yield store, Client(blocks.local_url, verbose=False), started
        blocks.close()
    store.close()


@pytest.fixture(autouse=True)
def no_job_left_queued(studio):
    yield
    store, _, _ = studio
    for job in job_rows.list_jobs(store):
        if job.status.active:
            job_rows.request_cancel(store, job.id)


@pytest.mark.parametrize("config,message", BAD)
def test_bad_loop_settings_are_refused_in_one_line_and_change_nothing(studio, config, message):
    store, client, started = studio
    jobs = len(started), job_rows.list_jobs(store)
    with pytest.raises(Exception) as error:
        client.predict(config, api_name="/start_loop")
    text = str(error.value)
    assert message in text and "\n" not in text and len(text) < 400, text
    assert (len(started), job_rows.list_jobs(store)) == jobs and count_prompts(store) == PROMPTS


def test_the_same_settings_fixed_are_accepted(studio):
    """The refusals above come from the values, not from the path: a good config of the same shape starts a job."""
    store, client, started = studio
    status = client.predict(json.dumps({"rounds": 1, "policy_lr": 0.001, "policy_batch_size": 8, "prompts_per_round": 8,
                                        "labels_per_round": 40}),
                            api_name="/start_loop")
    assert status["status"] == "queued" and started[-1][0] == "loop" and started[-1][1]["policy_lr"] == 0.001
