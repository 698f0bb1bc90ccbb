"""The loop's settings: one dataclass, validated before any job starts, saved with every round. No torch here,
so the UI can validate a config without loading a model."""

from __future__ import annotations

import copy
import difflib
import json
import math
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import ClassVar

from labeling.files.text_fields import refuse_surrogates
from labeling.judges.judge_endpoint import DEFAULT_MAX_MB, DEFAULT_TIMEOUT_S
from labeling.queue.check_pairs import DEFAULT_MIN_AGREEMENT
from labeling.queue.synthetic import DEFAULT_ORACLE
from labeling.versions.winrate import version_number
from storage.errors import InvalidInput
from storage.types import ROUND_SELECTORS, Selector

from ..jobs.layer import JobKind
from ..policy.config import Algorithm, RewardSource
from ..policy.dpo_config import DPOConfig, DPOSetupError
from ..settings import renamed_settings
from .label_schedule import first_round_labels, schedule_line
from .loop_rewards import LOOP_REWARDS, check_loop_reward
from .phase_settings import FLAT, PHASES, DPOPhase, PolicyPhase, RewardPhase, SFTPhase

# A real model's reward learning rate for one epoch, by `reward_lora`: an adapter and a fresh score head start at zero
# and need about a hundred times a full fine-tune's rate (on SmolLM2 one epoch at 1e-5 left an adapter at chance).
REWARD_LR = {True: 1e-3, False: 1e-5}


class Annotator(StrEnum):
    """Who labels a round's pairs: the synthetic oracle, or people in the Label tab (the loop waits for them)."""

    ORACLE = "oracle"
    HUMAN = "human"
    JUDGE = "judge"  # a judge model (RLAIF; hybrid with judge_threshold): trainers.loop.judging


class OnWarning(StrEnum):
    """What a loop does when a failure warning fires: go on, or pause before its next PPO/GRPO phase."""

    CONTINUE = "continue"
    PAUSE = "pause"


def round_seed(seed: int, round: int) -> int:
    """The seed of everything random in round `round` of a loop seeded `seed` (sampling, selection, training)."""
    return seed * 1000 + round


@dataclass(frozen=True, init=False)
class LoopConfig:
    """A loop's settings, validated when built: the loop's own (rounds, labels, annotator, sampling...) and one part
    per phase (`reward_model`, `policy`, `dpo`, `sft`: `trainers.loop.phase_settings`). Every setting also has a flat
    name, the one users, commands and stored jobs use (`policy_lr`, `reward_lora`): `LoopConfig(policy_lr=3e-4)`,
    `from_dict`, `setting(name)` and `to_dict()` speak it."""

    rounds: int = field(default=3, metadata={"help": "rounds of generate -> label -> reward model -> PPO or GRPO"})
    start_version: str | None = field(default=None, metadata={
        "help": "the policy version the first round trains from, named as the leaderboard names it (v3, or 3); later "
                "rounds train the version the round before made, and the KL term and win-rate pairs keep that "
                "version's SFT policy (None: the store's newest version)"})
    prompts_per_round: int = field(default=48, metadata={"help": "training prompts sampled each round"})
    samples_per_prompt: int = field(default=4, metadata={"help": "K: responses sampled per prompt"})
    labels_per_round: int = field(default=100, metadata={
        "help": f"N: new labels collected in the first round, then N x label_decay^i in round i (check pairs "
                f"included); the defaults give {schedule_line(100, 0.3, 3)}; or give label_budget instead"})
    label_budget: int | None = field(default=None, metadata={
        "help": "B: the labels that train over the whole loop (check pairs included), split over the rounds by the "
                "schedule (N, N x label_decay, ...: the N whose schedule sums closest to B); instead of "
                "labels_per_round"})
    label_decay: float = field(default=0.3, metadata={
        "help": "each later round collects this fraction of the previous round's labels (1: N every round)"})
    queue_reserve: int = field(default=50, metadata={"help": "extra pairs queued so annotators never run dry"})
    annotator: str = field(default=Annotator.ORACLE.value, metadata={
        "help": "oracle labels synthetically; human waits for labels from the studio's Label tab; judge: a judge model "
                "labels (RLAIF; with judge_threshold, hybrid)", "choices": Annotator})
    oracle: str = field(default=DEFAULT_ORACLE, metadata={"help": "module:function scoring a text"})
    oracle_noise: float = field(default=0.0, metadata={"help": "probability the oracle answers at random"})
    judge: str | None = field(default=None, metadata={
        "help": "annotator judge: a model folder, GGUF file or OpenAI-compatible endpoint URL (set by an admin on the "
                "command line; the studio uses only the judge serve was started with)"})
    judge_model: str | None = field(default=None, metadata={"help": "the model an endpoint judge serves"})
    judge_key_env: str | None = field(default=None, metadata={
        "help": "environment variable holding an endpoint judge's key (the key itself is never stored)"})
    judge_template: str | None = field(default=None, metadata={
        "help": "judge prompt template file (default: the shipped pairwise one, assets/judge_pairwise.md)"})
    judge_timeout: float | None = field(default=None, metadata={
        "help": f"seconds an endpoint judge has for each answer, connection to last byte (None: {DEFAULT_TIMEOUT_S:g}; "
                "a studio loop takes serve's --judge-timeout)"})
    judge_max_mb: float | None = field(default=None, metadata={
        "help": f"the largest answer read from an endpoint judge, in MB (None: {DEFAULT_MAX_MB:g}; a studio loop "
                "takes serve's --judge-max-mb)"})
    judge_threshold: float = field(default=0.0, metadata={
        "help": "hybrid: the judge's verdicts at least this confident train, its unsure pairs go to people "
                "(judge_people); 0: every verdict trains (RLAIF)"})
    judge_people: str = field(default=Annotator.HUMAN.value, metadata={
        "help": "who labels the pairs the judge is unsure of: human (the Label tab) or oracle (benchmarks)"})
    judge_min_agreement: float = field(default=0.6, metadata={
        "help": "warn when the judge, labelling for training, agrees with people's labels less often than this"})
    selector: str = field(default=Selector.RANDOM.value, metadata={
        "help": "pair selector: random, disagreement (an ensemble's), or a posterior one on the reward model's last "
                "layer: thompson, info_gain, diverse, d_optimal", "choices": ROUND_SELECTORS})
    rank_k: int = field(default=2, metadata={
        "help": "answers an annotator judges at once: 2 queues pairs; 3-6 queues rankings of that many of a prompt's "
                "samples (at most samples_per_prompt), each ranking one of the round's labels"})
    pair_with_previous: bool = field(default=False, metadata={
        "help": "also pair each round's samples with the previous version's samples of the same prompts (a wider "
                "pool, of pairs that differ more)"})
    reward_model: RewardPhase = field(default_factory=RewardPhase, metadata={
        "help": "how each round trains its reward model: ensemble and the reward_* settings"})
    algorithm: str = field(default=Algorithm.PPO.value, metadata={
        "help": "policy optimiser: ppo (critic, GAE), grpo (G responses per prompt, no critic), or dpo (the labels "
                "themselves, no reward model needed: iterative DPO against the SFT policy)",
        "choices": Algorithm})
    policy: PolicyPhase = field(default_factory=PolicyPhase, metadata={
        "help": "how each round runs PPO or GRPO: the policy_* settings, group_size, kl_coef and target_kl"})
    dpo: DPOPhase = field(default_factory=DPOPhase, metadata={"help": "how each round runs DPO: the dpo_* settings"})
    response_length: int = field(default=24, metadata={"help": "longest response, in tokens"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass"})
    top_k: int = field(default=0, metadata={"help": "sample among the k likeliest tokens (0: off)"})
    lora: bool = field(default=False, metadata={"help": "train LoRA adapters instead of all weights"})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 mixed precision for reward training and PPO (GPUs)"})
    seed: int = field(default=0, metadata={"help": "seed of sampling, selection and training"})
    check_share: float = field(default=0.1, metadata={
        "help": "share of each round's labels on check pairs (pairs the reward model ranks confidently; 0: none)"})
    check_min_agreement: float = field(default=DEFAULT_MIN_AGREEMENT, metadata={
        "help": "warn when check labels agree with the reward model less often than this"})
    on_warning: str = field(default=OnWarning.CONTINUE.value, metadata={
        "help": "on a failure warning: continue, or pause before the next PPO/GRPO phase", "choices": OnWarning})
    eval_prompts: int = field(default=16, metadata={
        "help": "held-out prompts each policy version is evaluated on, the same for every version (all of them when "
                "fewer are held out)"})
    eval_samples: int = field(default=2, metadata={"help": "samples of each evaluation prompt per policy version"})
    winrate_pairs: int = field(default=24, metadata={
        "help": "blind win-rate pairs queued per policy version: one of its evaluation samples against the SFT "
                "policy's (0: none); their labels never train and are not counted in labels_per_round"})
    winrate_previous: int = field(default=0, metadata={
        "help": "win-rate pairs per version against the previous version too, for the leaderboard (0: none)"})
    sft: SFTPhase = field(default_factory=SFTPhase, metadata={"help": "when and how the loop runs SFT: the sft_* "
                                                                                      "settings"})
    reward: str = field(default=RewardSource.RM.value, metadata={
        "help": "what PPO/GRPO maximises: rm (the reward model), functions (reward_functions alone: no labels, no "
                "reward model; rounds sample, optimise, evaluate) or rm+functions (rm_weight x RM + functions)",
        "choices": LOOP_REWARDS})
    reward_functions: list = field(default_factory=list, metadata={
        "help": 'reward functions as a JSON list, e.g. [{"name": "math_answer", "weight": 1.0}] (docs/rewards.md)'})
    rm_weight: float = field(default=1.0, metadata={"help": "the reward model's weight beside reward_functions"})

    def __init__(self, **settings):
        """Settings named flat, as users, commands and stored jobs name them (`policy_lr=3e-4`, `reward_lora=True`:
        each put in its phase's part), or whole phases (`policy=PolicyPhase(...)`); then checked."""
        parts: dict[str, dict] = {phase: {} for phase in PHASES}
        for name, value in settings.items():
            if name in FLAT:
                parts[FLAT[name][0]][FLAT[name][1].name] = value
            elif name not in self.__dataclass_fields__:
                raise TypeError(f"LoopConfig has no setting {name!r}")
            elif name not in PHASES:
                object.__setattr__(self, name, value)
        for f in fields(self):
            if f.name in PHASES:
                given = settings.get(f.name) or PHASES[f.name]()
                object.__setattr__(self, f.name, replace(given, **parts[f.name]))
            elif f.name not in settings:
                object.__setattr__(self, f.name, f.default_factory() if f.default is MISSING else f.default)
        self._normalise()
        self.check_settings()

    def _normalise(self) -> None:
        """The label budget turned into N (what every reader of N uses), the start version into "v3"."""
        if self.label_budget is not None and collects_labels(self):
            if not isinstance(self.label_budget, int) or self.label_budget < max(1, self.rounds):
                raise InvalidInput(f"label_budget must be at least 1 label per round ({self.rounds}), got "
                                   f"{self.label_budget}")
            object.__setattr__(self, "labels_per_round",
                               first_round_labels(self.label_budget, self.label_decay, self.rounds))
        if self.start_version is not None:  # "3" and "v3" are both stored as "v3"
            if not isinstance(self.start_version, str) or version_number(self.start_version) is None:
                raise InvalidInput(f"start_version must name a policy version as v3 or 3, got {self.start_version!r}")
            object.__setattr__(self, "start_version", f"v{version_number(self.start_version)}")

    def check_settings(self) -> None:
        """InvalidInput, in one line naming the setting and the fix, for a setting out of range or two that do not go
        together (each phase checks its own settings)."""
        for name, value in self.to_dict().items():
            if isinstance(value, float) and not math.isfinite(value):
                raise InvalidInput(f"{name} must be a finite number, got {value}")
        labels = collects_labels(self)  # a reward of the functions alone: no label, pair or queue setting is read
        positive = ("rounds", "response_length", "eval_prompts", "eval_samples") + (
            ("prompts_per_round", "labels_per_round") if labels else ())
        for name in positive:
            if getattr(self, name) < 1:
                raise InvalidInput(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.temperature > 0:
            raise InvalidInput(f"temperature must be positive, got {self.temperature}")
        self.reward_model.check_settings()
        self.policy.check_settings(grpo=self.algorithm == Algorithm.GRPO)
        self.dpo.check_settings()
        self.sft.check_settings()
        if self.queue_reserve < 0 or self.policy.init_kl_coef < 0:
            raise InvalidInput("queue_reserve and kl_coef must be 0 or more")
        if self.algorithm not in {a.value for a in Algorithm}:
            raise InvalidInput(f"algorithm must be one of {', '.join(Algorithm)}, got {self.algorithm!r}")
        if not 0 < self.top_p <= 1:
            raise InvalidInput(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InvalidInput(f"top_k must be 0 (off) or positive, got {self.top_k}")
        if not 0 <= self.oracle_noise <= 1:
            raise InvalidInput(f"oracle_noise must be between 0 and 1, got {self.oracle_noise}")
        if self.on_warning not in {o.value for o in OnWarning}:
            raise InvalidInput(f"on_warning must be one of {', '.join(OnWarning)}, got {self.on_warning!r}")
        if labels:
            check_label_settings(self)
        if ":" not in self.oracle:
            raise InvalidInput(f"oracle must be `module:function`, got {self.oracle!r}")
        check_loop_reward(self)
        try:
            DPOConfig(**dpo_settings(self)).check_settings()
        except DPOSetupError as exc:
            raise InvalidInput(str(exc)) from None

    RENAMED: ClassVar[dict[str, str]] = {  # old names accepted on read: the policy settings' before GRPO joined PPO,
        **{f"ppo_{name}": f"policy_{name}" for name in ("iterations", "batch_size", "mini_batches", "epochs", "lr")},
        "audit_share": "check_share", "audit_min_agreement": "check_min_agreement"}  # and the check pairs' settings

    @classmethod
    def from_dict(cls, values: dict) -> "LoopConfig":
        """Build from user input or a stored job: unknown keys and wrong types are errors naming the key; the old
        names in `RENAMED` are read as the new ones."""
        values = renamed_settings(values, cls.RENAMED, "loop")
        known = {f.name: f for f in cls.settings_fields()}
        unknown = sorted(set(values) - set(known))
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=3, cutoff=0.5) or list(known)[:3]
            raise InvalidInput(f"unknown loop setting {unknown[0]!r}; known settings: {', '.join(close)}, and "
                               f"{len(known) - len(close)} more (python app.py loop --help lists them)")
        for name, value in values.items():
            if not _type_ok(known[name].type, value):
                raise InvalidInput(f"loop setting {name!r} must be {known[name].type}, got {value!r}")
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> "LoopConfig":
        return cls.from_dict(settings_from_json(text))

    def updated(self, values: dict) -> "LoopConfig":
        """These settings with `values` (user input: old names accepted, unknown ones refused) on top. A label budget
        and a first round's labels are two ways to say how many labels: `values` gives one (it replaces the other's
        setting here), never both. `reward_lora` switched without `reward_lr` takes that kind's rate (`REWARD_LR`)."""
        values = renamed_settings(values, self.RENAMED, "loop")
        lora = values.get("reward_lora")
        if isinstance(lora, bool) and lora != self.reward_model.lora and "reward_lr" not in values:
            values = {**values, "reward_lr": REWARD_LR[lora]}  # a kind's rate: the other's wrecks or starves it
        if "labels_per_round" in values and values.get("label_budget") is not None:
            raise InvalidInput("give label_budget (the labels of the whole loop) or labels_per_round (the first "
                               "round's), not both")
        if "labels_per_round" in values:
            values = {**values, "label_budget": None}
        return LoopConfig.from_dict({**self.to_dict(), **values})

    @property
    def schedule(self) -> str:
        """The labels each round collects, in words ("100 + 30 + 9 = 139 labels over 3 rounds")."""
        return schedule_line(self.labels_per_round, self.label_decay, self.rounds)

    def setting(self, name: str):
        """The value of the flat setting `name` (`policy_lr`: `self.policy.learning_rate`)."""
        if name in FLAT:
            return getattr(getattr(self, FLAT[name][0]), FLAT[name][1].name)
        return getattr(self, name)

    def to_dict(self) -> dict:
        """Every setting by its flat name: the shape jobs store, the Train tab's JSON and the `loop` options take."""
        return {f.name: copy.deepcopy(self.setting(f.name)) for f in self.settings_fields()}

    @classmethod
    def settings_fields(cls) -> list[Field]:
        """A field per flat setting, in order, each phase's in its place (named flat: `policy_lr`, not `learning_rate`),
        as the `loop` options and `from_dict` read them."""
        return [flat for f in fields(cls) for flat in (_flat_fields(f.name) if f.name in PHASES else [f])]


def _flat_fields(phase: str) -> list[Field]:
    """The fields of the phase `phase` named as the flat settings they are."""
    named = []
    for f in fields(PHASES[phase]):
        flat = copy.copy(f)
        flat.name = f.metadata["flat"]
        named.append(flat)
    return named


def check_label_settings(config: LoopConfig) -> None:
    """The settings of a loop that collects labels fit together: K, the label schedule and queue, the annotator, the
    selector, the check and win-rate pairs (a loop on the reward functions alone reads none of them)."""
    if config.samples_per_prompt < 2:
        raise InvalidInput(f"samples_per_prompt must be at least 2 to form pairs, got {config.samples_per_prompt}")
    if not 0 < config.label_decay <= 1:
        raise InvalidInput(f"label_decay must be in (0, 1], got {config.label_decay}")
    if config.annotator not in {a.value for a in Annotator}:
        raise InvalidInput(f"annotator must be one of {', '.join(Annotator)}, got {config.annotator!r}")
    check_judge_settings(config)
    if config.selector not in ROUND_SELECTORS:
        raise InvalidInput(f"selector must be one of {', '.join(ROUND_SELECTORS)}, got {config.selector!r}")
    if config.selector == Selector.DISAGREEMENT and config.reward_model.ensemble < 2:
        raise InvalidInput("the disagreement selector needs an ensemble of 2 or more reward models; set ensemble")
    if not 2 <= config.rank_k <= min(6, config.samples_per_prompt):
        raise InvalidInput(f"rank_k must be 2 (pairs) to 6 and at most samples_per_prompt "
                           f"({config.samples_per_prompt}), got {config.rank_k}")
    most_pairs = config.prompts_per_round * math.comb(config.samples_per_prompt, config.rank_k)
    if config.labels_per_round > most_pairs:
        raise InvalidInput(f"labels_per_round is {config.labels_per_round} but a round queues at most "
                           f"{most_pairs} pairs (prompts_per_round x K(K-1)/2); lower it or raise "
                           "prompts_per_round")
    if not 0 <= config.check_share <= 0.5:
        raise InvalidInput(f"check_share must be between 0 and 0.5 (a share of each round's labels), got "
                           f"{config.check_share}")
    if not 0 < config.check_min_agreement < 1:
        raise InvalidInput(f"check_min_agreement must be between 0 and 1, got {config.check_min_agreement}")
    evaluated = config.eval_prompts * config.eval_samples
    for name in ("winrate_pairs", "winrate_previous"):
        if not 0 <= getattr(config, name) <= evaluated:
            raise InvalidInput(f"{name} is {getattr(config, name)} but each version has eval_prompts x eval_samples "
                               f"= {evaluated} evaluation samples to pair; use 0 to {evaluated}, or raise "
                               "eval_prompts or eval_samples")


def check_judge_settings(config: LoopConfig) -> None:
    """The judge settings fit together: a judge named for annotator judge, a threshold in [0, 1], people who exist."""
    if config.annotator == Annotator.JUDGE and not config.judge:
        raise InvalidInput("annotator judge needs judge: a model folder, a GGUF file or an endpoint URL (--judge)")
    if not 0 <= config.judge_threshold <= 1 or not 0 <= config.judge_min_agreement <= 1:
        raise InvalidInput("judge_threshold and judge_min_agreement must be between 0 and 1")
    if config.judge_people not in (Annotator.HUMAN, Annotator.ORACLE):
        raise InvalidInput(f"judge_people must be human or oracle, got {config.judge_people!r}")
    if any(value is not None and not value > 0 for value in (config.judge_timeout, config.judge_max_mb)):
        raise InvalidInput(f"judge_timeout and judge_max_mb must be positive or null, got {config.judge_timeout} and "
                           f"{config.judge_max_mb}")


def settings_from_json(text: str) -> dict:
    """A JSON object of settings (empty text: none), or one line saying what is wrong with the JSON."""
    try:
        values = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"the loop config is not valid JSON ({exc.msg} at char {exc.pos}); fix it and "
                           "retry") from None
    except RecursionError:
        raise InvalidInput("the loop config is nested too deeply (lists or objects inside one another); send a JSON "
                           "object of settings") from None
    if not isinstance(values, dict):
        raise InvalidInput("the loop config must be a JSON object of settings")
    refuse_surrogates({"settings": values})
    return values


def _type_ok(annotation: str, value) -> bool:
    """Does a JSON value fit a field annotation ("int", "float", "str", "bool", "float | None", "int | None")?"""
    if value is None:
        return "None" in annotation
    if isinstance(value, bool):
        return annotation == "bool"
    if annotation.startswith("float"):
        return isinstance(value, (int, float))
    return isinstance(value, {"int": int, "str": str, "bool": bool, "list": list}[annotation.removesuffix(" | None")])


def reward_settings(config: LoopConfig, round: int = 0) -> dict:
    """The `trainers.reward.config.RewardConfig` fields a loop config sets (plain values: no torch needed here)."""
    return {**asdict(config.reward_model), "epochs": float(config.reward_model.epochs), "round": round,
            "seed": round_seed(config.seed, round), "split_seed": config.seed, "label_noise": label_noise(config),
            "bf16": config.bf16}


def label_noise(config: LoopConfig) -> float:
    """The label-noise rate ε the reward model is told: the oracle's own rate of random votes (a human annotator's
    is unknown: 0)."""
    noisy_oracle = config.annotator == Annotator.ORACLE and config.oracle_noise < 1  # ε = 1: nothing to learn
    return config.oracle_noise if noisy_oracle else 0.0


def policy_settings(config: LoopConfig, round: int = 0) -> dict:
    """The `trainers.policy.config.PolicyConfig` fields a loop config sets, PPO's or GRPO's (plain values: no torch
    here)."""
    phase = {name: value for name, value in asdict(config.policy).items() if name != "iterations"}  # PolicyRun's
    return {"algorithm": config.algorithm, **phase, "kl_horizon": kl_horizon(config),
            "response_length": config.response_length,
            "temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k, "lora": config.lora,
            "bf16": config.bf16, "monitor_oracle": config.oracle if config.annotator == Annotator.ORACLE and
            collects_labels(config) else None,
            "seed": round_seed(config.seed, round), "save_every": max(1, config.policy.iterations // 4)}


def dpo_settings(config: LoopConfig, round: int = 0) -> dict:
    """The `trainers.policy.dpo_config.DPOConfig` fields a loop config sets: its dpo_* settings, and the learning
    rate, epochs, LoRA, precision and sampling it shares with PPO and GRPO (plain values: no torch here)."""
    return {**asdict(config.dpo), "epochs": float(config.policy.epochs),
            "learning_rate": config.policy.learning_rate, "lora": config.lora, "bf16": config.bf16,
            "response_length": config.response_length, "temperature": config.temperature, "top_p": config.top_p,
            "top_k": config.top_k, "monitor_oracle": config.oracle if config.annotator == Annotator.ORACLE else None,
            "seed": round_seed(config.seed, round)}


def kl_horizon(config: LoopConfig) -> int:
    """The adaptive β controller's horizon: the loop's episodes over all rounds, so β can move as far over the whole
    loop as Ziegler et al.'s controller does over its horizon (β is carried from round to round)."""
    group = config.policy.group_size if config.algorithm == Algorithm.GRPO else 1
    return config.rounds * config.policy.iterations * config.policy.batch_size * group


def needs_reward_model(config: LoopConfig) -> bool:
    """Does a round train a reward model: for PPO and GRPO unless the reward is the functions alone; under DPO only
    for the disagreement selector or the check pairs."""
    if not collects_labels(config):
        return False
    return config.algorithm != Algorithm.DPO or config.selector == Selector.DISAGREEMENT or config.check_share > 0


def collects_labels(config: LoopConfig) -> bool:
    """Does a round queue pairs and collect labels: not when the reward is the reward functions alone."""
    return config.reward != RewardSource.FUNCTIONS


def policy_job_kind(config: LoopConfig) -> JobKind:
    """The job that trains the policy once with these settings: a `ppo` job (PPO or GRPO), or a `dpo` job."""
    return JobKind.DPO if config.algorithm == Algorithm.DPO else JobKind.POLICY


def job_settings(kind: JobKind | str, config: LoopConfig) -> dict:
    """A job row's config for the Train tab's buttons: the loop itself, or one reward-model, PPO or DPO run."""
    if kind == JobKind.LOOP:
        return config.to_dict()
    if kind == JobKind.REWARD:
        return reward_settings(config)
    if kind == JobKind.DPO:
        return {"settings": dpo_settings(config)}
    return {"iterations": config.policy.iterations, "reward": config.reward,
            "reward_functions": config.reward_functions, "rm_weight": config.rm_weight,
            "settings": policy_settings(config)}
