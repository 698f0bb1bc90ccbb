"""A round's summary line (the headless loop's terminal, the job's log), against hand-written lines."""

from labeling.versions.winrate import VersionFigures
from trainers.loop.round_lines import round_line

SUMMARY = {"labels": 30, "reward_val_accuracy": 0.9111111164093018, "score": 0.4234, "kl": 1.2049, "oracle_score": 0.81}
V1 = VersionFigures(2, "v1", 1, 24, 12, 6, 6, 0.625, 0.43, 0.79, 0.62, 0.41, 0.80, 0.1)


def test_a_round_reads_as_one_line_with_its_numbers_rounded():
    assert round_line(2, 3, "v2", SUMMARY, oracle_before=0.5312, judged=V1) == (
        "round 2/3 done: v2 · 30 labels · reward val. accuracy 91% · RM score +0.42 · KL 1.20 · oracle score "
        "0.53 → 0.81 · v2 vs SFT pending (v1: 62% [43%, 79%], 24 judgements)")  # v2's pairs are judged after
    assert round_line(2, 3, "v1", SUMMARY, judged=V1, judged_by="the oracle annotator").endswith(
        "oracle score 0.81 · v1 vs SFT 62% [43%, 79%] (24 judgements by the oracle annotator)")  # who judged


def test_what_a_round_did_not_measure_is_left_out():
    bare = {"labels": 8, "reward_val_accuracy": None, "score": None, "kl": None}
    unjudged = VersionFigures(2, "v1", 1, 0, 0, 0, 0, None, None, None, None, None, None, None)
    assert round_line(1, 1, "v1", bare, judged=unjudged) == "round 1/1 done: v1 · 8 labels"
    assert round_line(1, 2, "v1", {**bare, "oracle_score": -0.25, "check_agreement": 0.875}) == (
        "round 1/2 done: v1 · 8 labels · oracle score -0.25 · check-pair agreement 88%")


def test_a_step_reads_as_its_epoch_and_ensemble_member():
    from trainers.loop.rounds import epoch_position

    assert [epoch_position(done, 60, 3) for done in (1, 20, 21, 60)] == ["epoch 1/3", "epoch 1/3", "epoch 2/3",
                                                                          "epoch 3/3"]
    assert epoch_position(45, 60, 2, members=3) == "member 3/3, epoch 1/2"  # 20 steps each: step 5 of member 3
    assert epoch_position(40, 60, 2, members=3) == "member 2/3, epoch 2/2"
