"""Opens the judge an admin named: an OpenAI-compatible endpoint (a URL), or a local model folder or GGUF file (torch,
loaded only here, in a worker or the terminal). Torch-free until a local judge is opened.

    client = open_judge("http://127.0.0.1:8000/v1", model="qwen", key_env="JUDGE_KEY", cache_dir=store.data_dir)
    client = open_judge(url, store.data_dir, "qwen", timeout_s=20, max_mb=2)   # an endpoint's limits (None: defaults)
"""

from __future__ import annotations

from pathlib import Path

from labeling.judges.judge import JudgeClient
from labeling.judges.judge_endpoint import DEFAULT_MAX_MB, DEFAULT_TIMEOUT_S, EndpointClient, is_endpoint
from storage.errors import InvalidInput

JUDGES_FOLDER = "judges"  # where a GGUF judge is converted once, in the store's data folder


def endpoint_client(url: str, model: str | None, key_env: str | None, timeout_s: float | None,
                    max_mb: float | None) -> EndpointClient:
    """The endpoint judge at `url`; a limit left None takes the client's default."""
    return EndpointClient(url, model=model or "", key_env=key_env,
                          timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
                          max_mb=DEFAULT_MAX_MB if max_mb is None else max_mb)


def check_judge(judge: str, model: str | None = None, key_env: str | None = None,
                timeout_s: float | None = None, max_mb: float | None = None) -> None:
    """What can be checked of a judge before anything is loaded or a store opened (an endpoint's URL, model name and
    key variable; a local judge's path); InvalidInput in one line."""
    if is_endpoint(judge):
        endpoint_client(judge, model, key_env, timeout_s, max_mb)
        return
    if model is not None or key_env is not None:
        raise InvalidInput("--judge-model and --judge-key-env are for an endpoint judge (an http(s) URL); a local "
                           "judge is named by its folder or GGUF file alone")
    if not Path(judge).exists():
        raise InvalidInput(f"no judge model at {judge}; give a model folder, a GGUF file or an http(s) URL")


def open_judge(judge: str, cache_dir: Path, model: str | None = None, key_env: str | None = None,
               timeout_s: float | None = None, max_mb: float | None = None) -> JudgeClient:
    """The judge `judge` names: an endpoint (with `model`, the key in `key_env`, each request's deadline `timeout_s`
    and largest answer `max_mb`; None: the defaults), else a local model (a folder or GGUF file, converted once under
    `cache_dir/judges`)."""
    check_judge(judge, model, key_env, timeout_s, max_mb)
    if is_endpoint(judge):
        return endpoint_client(judge, model, key_env, timeout_s, max_mb)
    from .judge_model import LocalJudge

    return LocalJudge.load(judge, cache_dir / JUDGES_FOLDER)
