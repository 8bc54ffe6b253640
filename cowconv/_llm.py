"""``LLM``: the model configuration an agent calls.

>>> llm = LLM(model="openai/gpt-4o", api_key="sk-secret", usage_id="main")
>>> llm
LLM(model='openai/gpt-4o', api_key=SecretStr('**********'), base_url=None, usage_id='main', ...)
>>> "sk-secret" in llm.model_dump_json()
False
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, SerializationInfo, field_serializer

__all__ = ["LLM"]


class LLM(BaseModel):
    """An LLM reached through litellm, named ``provider/model``.

    The API key is a ``SecretStr``: it never appears in reprs or in default
    dumps. ``model_dump(context={"expose_secrets": True})`` writes it out
    (the store uses this so a resumed or forked conversation can still run).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    api_key: SecretStr | None = None
    base_url: str | None = None
    usage_id: str = "default"
    temperature: float | None = None
    max_output_tokens: int | None = Field(default=None, gt=0)
    timeout: float | None = Field(default=120.0, gt=0)
    num_retries: int = Field(default=3, ge=0)
    retry_min_wait: float = Field(default=1.0, ge=0)
    retry_max_wait: float = Field(default=20.0, ge=0)

    def __repr_args__(self) -> Any:
        shown = ("model", "api_key", "base_url", "usage_id")
        return [(name, getattr(self, name)) for name in shown]

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + ", ...)"

    @field_serializer("api_key")
    def _dump_api_key(self, key: SecretStr | None, info: SerializationInfo) -> Any:
        if key is None:
            return None
        if isinstance(info.context, dict) and info.context.get("expose_secrets"):
            return key.get_secret_value()
        return "**********" if info.mode == "json" else key
