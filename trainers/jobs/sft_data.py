"""Which demonstrations SFT trains on: the current ones (by one author when asked) whose prompt is not excluded and
whose prompt and answer (closed by the end-of-turn id) fit the policy's context. What does not fit is kept (exports
keep it) and left out, counted and named by id, never cut. No torch: the import command counts with it and the Train
tab checks with it (`checked_use`).

    use = demonstration_use(store, policy.path)
    print(use.line())   # "demonstrations: 40 of 42 train SFT; 2 too long for the policy's context of 512 (3, 7)"
"""

from __future__ import annotations

from dataclasses import dataclass

from storage import Store
from storage.demonstrations import Demonstration, count_demonstrations, list_demonstrations
from storage.errors import InvalidInput
from storage.types import Policy

from ..models.chat_format import ChatFormat, listed, model_context
from ..policy.sft_config import MIN_ROOT_DEMONSTRATIONS


@dataclass(frozen=True)
class DemonstrationUse:
    """The current demonstrations and those SFT uses; `context` is None when the policy's is unknown here."""

    total: int
    used: list[Demonstration]
    too_long: list[int]  # demonstration ids
    excluded: int
    context: int | None

    def line(self, whose: str = "") -> str:
        """ "demonstrations: 40 of 42 train SFT; 2 too long for the policy's context of 512 (demonstrations 3, 7)"."""
        parts = [f"{len(self.used)} of {self.total} train SFT"]
        if self.too_long:
            parts.append(f"{len(self.too_long)} too long for the policy's context of {self.context} (demonstrations "
                         f"{listed(self.too_long)})")
        if self.excluded:
            parts.append(f"{self.excluded} of excluded prompts")
        return f"demonstrations{whose}: {'; '.join(parts)}"


def sequence_lengths(chat: ChatFormat, demos: list[Demonstration]) -> list[int]:
    """Tokens SFT reads for each demonstration: the prompt as the chat format renders it and the answer closed by the
    end-of-turn id."""
    return [len(p) + len(r) for p, r in zip(chat.prompts_ids([d.prompt_content for d in demos]),
                                            chat.responses_ids([d.text for d in demos]), strict=True)]


def demonstration_use(store: Store, policy_path: str, author: str | None = None,
                      ids: tuple[int, ...] | None = None, since: float | None = None) -> DemonstrationUse:
    """The current demonstrations (by `author`, with `ids`, stored after `since`, when given) against the policy at
    `policy_path`."""
    demos = list_demonstrations(store, author=author)
    if since is not None:
        demos = [d for d in demos if d.created > since]
    if ids is not None:
        wanted = set(ids)
        demos = [d for d in demos if d.id in wanted]
    kept = [d for d in demos if not d.prompt_excluded]
    context = model_context(policy_path)
    too_long: list[int] = []
    if context is not None and kept:
        lengths = sequence_lengths(ChatFormat.from_dir(policy_path), kept)
        too_long = [d.id for d, n in zip(kept, lengths, strict=True) if n > context]
    long = set(too_long)
    return DemonstrationUse(len(demos), [d for d in kept if d.id not in long], too_long, len(demos) - len(kept),
                            context)


def check_sft_first(sft_first: bool, store: Store, lora: bool = False) -> None:
    """Refuse, in one line before any job, a loop's `sft_first` on a store without demonstrations, or (a full
    fine-tune, not `lora`) with fewer than a new root needs (`MIN_ROOT_DEMONSTRATIONS`)."""
    count = count_demonstrations(store) if sft_first else None
    if count == 0:
        raise InvalidInput("sft_first needs demonstrations, and the store has none; write some in the Label tab (W) "
                           f"or import them (python app.py import-demonstrations --db {store.path} FILE), or turn "
                           "sft_first off")
    if count is not None and not lora and count < MIN_ROOT_DEMONSTRATIONS:
        raise InvalidInput(f"sft_first fine-tunes every weight into a new SFT policy, which needs at least "
                           f"{MIN_ROOT_DEMONSTRATIONS} demonstrations, and the store has {count}; write more, train "
                           "LoRA (lora), or turn sft_first off")


def checked_use(store: Store, start: Policy, author: str | None, since: float | None = None) -> DemonstrationUse:
    """The demonstrations SFT of `start` uses (by `author` when given: a person, or an import's source name; stored
    after `since` when given); InvalidInput, in one line, when none would train."""
    use = demonstration_use(store, start.path, author=author, since=since)
    if use.total == 0 and author is not None:
        authors = ", ".join(sorted({d.author for d in list_demonstrations(store)})[:8]) or "nobody yet"
        raise InvalidInput(f"no demonstrations by {author!r}; the store's come from: {authors} "
                           "(import-demonstrations --source names an import)")
    if use.total == 0 and since is not None:
        raise InvalidInput("no demonstrations were stored since the last SFT step; write some first")
    if use.total == 0:
        raise InvalidInput("the store has no demonstrations; write some in the Label tab (W) or import them "
                           f"(python app.py import-demonstrations --db {store.path} FILE)")
    if not use.used:
        raise InvalidInput(f"no demonstration can train SFT ({use.line()}); shorten them or include their prompts "
                           "again (python app.py prompts)")
    return use
