"""A minimal stand-in for slime's Sample (slime/utils/types.py), for the
tests of troupe_slime without slime, torch or a GPU.

It has slime's fields, defaults, Status values and the same from_dict /
to_dict / get_reward_value behaviour, as documented in
shared/reference/slime-sample.md (slime at commit 624b824a): from_dict
requires "status" and keeps unknown keys as attributes. It is NOT slime:
the adapter is used with slime's own class in training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    multimodal_train_input_id: str | None = None
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_routed_experts: list[list[int]] | None = None
    rollout_top_p_token_ids: list[int] | None = None
    rollout_top_p_token_offsets: list[int] | None = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    train_metadata: dict | None = None
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    session_id: str | None = None
    non_generation_time: float = 0.0

    @dataclass
    class SpecInfo:
        spec_accept_token_num: int = 0
        spec_draft_token_num: int = 0
        spec_verify_ct: int = 0
        completion_token_num: int = 0

        def to_dict(self):
            return dict(self.__dict__)

        @staticmethod
        def from_dict(data: dict):
            return Sample.SpecInfo(**{k: data.get(k, 0) for k in Sample.SpecInfo.__dataclass_fields__})

    @dataclass
    class PrefixCacheInfo:
        cached_tokens: int = 0
        total_prompt_tokens: int = 0

        def to_dict(self):
            return dict(self.__dict__)

        @staticmethod
        def from_dict(data: dict):
            return Sample.PrefixCacheInfo(**{k: data.get(k, 0) for k in Sample.PrefixCacheInfo.__dataclass_fields__})

    spec_info: SpecInfo = field(default_factory=SpecInfo)
    prefix_cache_info: PrefixCacheInfo = field(default_factory=PrefixCacheInfo)

    def to_dict(self):
        value = self.__dict__.copy()
        value["status"] = self.status.value
        value["spec_info"] = self.spec_info.to_dict()
        value["prefix_cache_info"] = self.prefix_cache_info.to_dict()
        return value

    @staticmethod
    def from_dict(data: dict):
        data = dict(data)
        data["status"] = Sample.Status(data["status"])  # required, as in slime
        data["spec_info"] = Sample.SpecInfo.from_dict(data.get("spec_info", {}))
        data["prefix_cache_info"] = Sample.PrefixCacheInfo.from_dict(data.get("prefix_cache_info", {}))
        fields = set(Sample.__dataclass_fields__)
        sample = Sample(**{k: v for k, v in data.items() if k in fields})
        for key, value in data.items():
            if key not in fields:
                setattr(sample, key, value)
        return sample

    def get_reward_value(self, args) -> float:
        return self.reward if not args.reward_key else self.reward[args.reward_key]
