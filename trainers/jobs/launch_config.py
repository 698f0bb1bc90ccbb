"""An accelerate config file, read as YAML without torch (the UI process shows it): how many processes on how many
machines, the mixed precision, the DeepSpeed stage; and, one line each, what the studio refuses to run under it.

A job started with a config (`serve --accelerate-config FILE`, or the option on `loop`, `ppo`, `train-reward`) runs
each training phase as an `accelerate launch --config_file FILE` of `trainers.entry.phase_worker`; the job row keeps
`to_dict()`, so its status says how it runs and a resume uses the same file.

    launch = read_launch_config("accelerate/cpu-2proc.yaml")   # InvalidInput: missing, unreadable or unusable
    launch.describe()   # "2 processes on 1 machine (CPU), mixed precision no, DeepSpeed off"
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from storage.errors import InvalidInput

SUPPORTED_TYPES = ("NO", "MULTI_GPU", "DEEPSPEED")  # distributed types a phase runs under (MULTI_GPU + use_cpu: CPUs)
PRECISIONS = ("no", "bf16")  # what PPO and the reward model train in; fp16 and fp8 were never run here
DEFAULT_ZERO_STAGE = 2  # accelerate's, when a DeepSpeed config names none
MAKE_ONE = "write one with `accelerate config`, or start from accelerate/cpu-2proc.yaml"


@dataclass(frozen=True)
class AccelerateLaunch:
    """What an accelerate config asks for, as far as the studio shows and checks it."""

    config_file: str  # absolute path
    distributed_type: str
    processes: int  # in all, over every machine
    machines: int
    machine_rank: int
    mixed_precision: str
    deepspeed_stage: int | None
    use_cpu: bool
    gpu_ids: str  # "all" or a comma-separated list
    main_process_port: int | None

    @property
    def processes_per_machine(self) -> int:
        return self.processes // self.machines

    @property
    def gpus_needed(self) -> int:
        """GPUs this machine must have for its processes (0 on the CPU)."""
        if self.use_cpu:
            return 0
        listed = [int(i) for i in self.gpu_ids.split(",") if i.strip()] if self.gpu_ids != "all" else []
        return max([self.processes_per_machine, *(i + 1 for i in listed)])

    def describe(self) -> str:
        """One line: processes, machines, devices, mixed precision, DeepSpeed stage."""
        where = "CPU" if self.use_cpu else f"{self.processes_per_machine} GPU{'s' * (self.processes_per_machine > 1)}"
        machines = f"{self.machines} machine{'s' * (self.machines > 1)}"
        if self.machines > 1:
            where += " each"
        deepspeed = f"ZeRO-{self.deepspeed_stage}" if self.deepspeed_stage is not None else "off"
        return (f"{self.processes} process{'es' * (self.processes > 1)} on {machines} ({where}), mixed precision "
                f"{self.mixed_precision}, DeepSpeed {deepspeed}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> AccelerateLaunch:
        return cls(**values)


def read_launch_config(path: str | Path) -> AccelerateLaunch:
    """The accelerate config at `path` (YAML, or JSON as accelerate also takes), checked; InvalidInput in one line
    when it is missing, unreadable, not a config, or asks for what the studio cannot run."""
    file = Path(path)
    if not file.exists():
        raise InvalidInput(f"accelerate config {path} does not exist; {MAKE_ONE}")
    try:
        values = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise InvalidInput(f"cannot read the accelerate config {path} ({reason}); {MAKE_ONE}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InvalidInput(f"the accelerate config {path} is not valid YAML{where}; {MAKE_ONE}") from None
    if not isinstance(values, dict):
        raise InvalidInput(f"the accelerate config {path} holds no settings (e.g. `num_processes: 2`); {MAKE_ONE}")
    return _checked(file.resolve(), values)


def _checked(file: Path, values: dict) -> AccelerateLaunch:
    kind = str(values.get("distributed_type", "NO")).upper()
    processes, machines = _count(file, values, "num_processes"), _count(file, values, "num_machines")
    precision = {False: "no", None: "no"}.get(values.get("mixed_precision"), values.get("mixed_precision"))
    launch = AccelerateLaunch(str(file), kind, processes, machines, _count(file, values, "machine_rank", 0),
                              str(precision).lower(), _deepspeed_stage(file, values) if kind == "DEEPSPEED" else None,
                              bool(values.get("use_cpu", False)), str(values.get("gpu_ids", "all") or "all"),
                              values.get("main_process_port"))
    _refuse_what_cannot_run(file, values, launch)
    return launch


def _count(file: Path, values: dict, name: str, least: int = 1) -> int:
    value = values.get(name, least)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise InvalidInput(f"{name} in the accelerate config {file} must be a whole number of at least {least}, "
                           f"got {value!r}")
    return value


def _deepspeed_stage(file: Path, values: dict) -> int:
    """The ZeRO stage of a DeepSpeed config: `deepspeed_config.zero_stage`, or the JSON file it names (accelerate's
    default, 2, when neither says)."""
    settings = values.get("deepspeed_config") or {}
    if "zero_stage" in settings:
        return int(settings["zero_stage"])
    named = settings.get("deepspeed_config_file")
    if named:
        try:
            return int(json.loads(Path(named).read_text()).get("zero_optimization", {}).get("stage", 0))
        except (OSError, ValueError, AttributeError):
            raise InvalidInput(f"cannot read the DeepSpeed config {named} named in {file}; give a readable JSON file "
                               "with zero_optimization.stage") from None
    return DEFAULT_ZERO_STAGE


def _refuse_what_cannot_run(file: Path, values: dict, launch: AccelerateLaunch) -> None:
    """One line naming the setting and the fix, for each thing the studio's phases cannot run under."""
    if values.get("compute_environment", "LOCAL_MACHINE") != "LOCAL_MACHINE":
        raise InvalidInput(f"the accelerate config {file} is for {values['compute_environment']}; the studio runs "
                           "on your machines only (compute_environment: LOCAL_MACHINE)")
    if launch.deepspeed_stage == 3:
        raise InvalidInput(f"the accelerate config {file} asks for DeepSpeed ZeRO-3, which PPO as written cannot "
                           "run: its reference is a deep copy of the policy and generation needs whole parameters; "
                           "use ZeRO stage 1 or 2, or MULTI_GPU")
    if launch.distributed_type in ("NO", "MULTI_CPU") and launch.processes > 1:
        raise InvalidInput(f"distributed_type {launch.distributed_type} in {file} starts one process under accelerate "
                           "launch; for several use distributed_type: MULTI_GPU (on CPUs with use_cpu: true, as "
                           "accelerate/cpu-2proc.yaml does)")
    if launch.distributed_type not in SUPPORTED_TYPES + ("MULTI_CPU",):
        raise InvalidInput(f"distributed_type {launch.distributed_type} in {file} is not supported: generation in "
                           f"PPO needs whole parameters on every process; use {', '.join(SUPPORTED_TYPES)}")
    if launch.mixed_precision not in PRECISIONS:
        raise InvalidInput(f"mixed_precision {launch.mixed_precision} in {file} is not supported; use "
                           f"{' or '.join(PRECISIONS)} (the studio trains in float32 or bf16)")
    if launch.processes % launch.machines or launch.machine_rank >= launch.machines:
        raise InvalidInput(f"the accelerate config {file} asks for {launch.processes} processes on "
                           f"{launch.machines} machines as machine {launch.machine_rank}; num_processes counts every "
                           "machine's processes (a multiple of num_machines) and machine_rank is below num_machines")
    if launch.machines > 1 and not (values.get("main_process_ip") and launch.main_process_port):
        raise InvalidInput(f"the accelerate config {file} spans {launch.machines} machines but names no "
                           "main_process_ip and main_process_port; give the main machine's address and a free port")
    if launch.deepspeed_stage is not None and importlib.util.find_spec("deepspeed") is None:
        raise InvalidInput(f"the accelerate config {file} uses DeepSpeed, which is not installed here; "
                           "pip install deepspeed, or use a config without it")
