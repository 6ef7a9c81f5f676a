"""Exception hierarchy of the simulator (mapped to HTTP statuses only in :mod:`sim.pod.app`)."""

from __future__ import annotations


class SimError(Exception):
    """Base class of every simulator error."""


class ConfigError(SimError):
    """Invalid or unknown configuration (bad preset name, unknown key, impossible sizes)."""


class RequestRejected(SimError):
    """A request the engine refuses to admit; ``code`` is a short machine-readable reason."""

    code = "rejected"


class PodFailed(RequestRejected):
    """The pod is down (a scenario's ``fail`` event) and takes no requests."""

    code = "pod_failed"

    def __init__(self, message: str = "the pod is down (scenario failure)") -> None:
        super().__init__(message)


class PromptTooLong(RequestRejected):
    """Prompt (or prompt + requested output) does not fit in ``max_model_len``."""

    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, requested_output: int, max_model_len: int) -> None:
        total = prompt_tokens + requested_output
        super().__init__(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{total} tokens ({prompt_tokens} in the prompt, {requested_output} in the completion). "
            "Please reduce the length of the prompt or completion."
        )
        self.prompt_tokens = prompt_tokens
        self.requested_output = requested_output
        self.max_model_len = max_model_len
