"""The Samples tab (app/versions/samples_tab.py): held-out samples of every policy version side by side, shown literally
(a conversation prompt as turns), the annotator view, and what the tab shows each time it opens. The store is filled by
tests.helpers.fill_synthetic_run."""

import pytest

from storage.prompts import add_prompts, list_prompts
from storage.types import Outcome
from tests.helpers import SYNTHETIC_HELDOUT, add_eval_samples, fill_synthetic_run, label_pairs


def test_samples_side_by_side_shown_literally(store):
    from app.versions.samples_tab import samples_html
    from storage.generations import eval_samples
    from storage.policies import list_policies

    fill_synthetic_run(store)
    page = samples_html(eval_samples(store), list_policies(store))
    assert page.count("<th data-policy=") == 4 and "v0 · SFT policy" in page and "v3 · store round 3" in page
    assert page.count('<td class="prompt">') == 3
    assert "<b>kind</b>" not in page and "&lt;b&gt;kind&lt;/b&gt; &amp; true." in page
    assert "mean reward +0.60 · mean oracle 0.70" in page  # policy 4: every sample reward 0.6, oracle 0.7
    one = samples_html(eval_samples(store), list_policies(store), prompt="Name a fruit.")
    assert one.count('<td class="prompt">') == 1 and one.count('<div class="sample">') == 4 * 2


def test_samples_show_a_conversation_prompt_as_turns(store):
    from app.context import Studio
    from app.render import text_html
    from app.versions.samples_tab import ALL_PROMPTS, show_samples
    from labeling.transfer.conversations import conversation_text
    from storage.prompts import NewPrompt

    run = fill_synthetic_run(store)
    turns = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Say <b>hi</b>."}]
    add_prompts(store, [NewPrompt(conversation_text(turns), turns)], heldout=True)
    conversation = list_prompts(store, heldout=True)[-1]
    add_eval_samples(store, run["policy_ids"][-1], [conversation], 3)
    page = show_samples(Studio(store), ALL_PROMPTS).table
    assert f'<td class="prompt">{text_html(turns)}</td>' in page
    assert '<td class="prompt">' + text_html(SYNTHETIC_HELDOUT[0]) + "</td>" in page  # a text prompt stays text
    assert page.count('<div class="turn ') == 2 and "<b>" not in page


def test_annotator_view(store):
    from app.context import Studio
    from app.versions.samples_tab import annotators_html, rm_agreement_by_annotator

    fill_synthetic_run(store)
    studio = Studio(store)
    assert rm_agreement_by_annotator(studio) == {"alice": 0.75, "bob": pytest.approx(0.8)}  # the newest round's
    page = annotators_html(studio)
    # alice: 12 x first; bob: 9 x first, 3 x second -> agreement 9/12; chance agreement (12*9)/144 = 0.75 -> kappa 0
    assert ("2 annotators · 24 labels · agreement 75% over 12 rating pairs on 12 shared pairs · Light&#x27;s κ 0.00"
            in page)
    assert "<td>alice</td><td>12</td><td>0</td><td>0%</td><td>0%</td>" in page and "<td>80%</td>" in page


def test_annotator_view_with_one_annotator(store, queue_pairs):
    from app.context import Studio
    from app.versions.samples_tab import annotators_html

    assert "No labels yet" in annotators_html(Studio(store))
    label_pairs(store, "oracle", {queue_pairs([("p", "a", "b")])[0]: Outcome.FIRST})
    assert "1 annotator · 1 label · no pair labeled by two annotators yet" in annotators_html(Studio(store))


def test_opening_the_samples_tab_shows_the_samples_of_now(store):
    from app.context import Studio
    from app.versions.samples_tab import ALL_PROMPTS, show_samples

    studio = Studio(store)
    empty = show_samples(studio, "Name a fruit.")
    assert empty.prompt.value == ALL_PROMPTS and "No policy version yet" in empty.table
    assert "No labels" in empty.annotators
    fill_synthetic_run(store, rounds=1, reward_steps=4, policy_iterations=2)
    shown = show_samples(studio, "Name a fruit.")
    assert shown.prompt.value == "Name a fruit." and shown.table.count('<td class="prompt">') == 1
    assert "<td>alice</td>" in shown.annotators
