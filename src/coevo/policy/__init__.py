"""How an agent acts: chat rendering, Hugging Face policies and locally made tiny models.

`render` is imported here (it needs no torch); `coevo.policy.hf` and `coevo.policy.tiny` load
torch and transformers, so import them where they are used.
"""

from coevo.policy.render import (
    ContextTooLongError,
    Conversation,
    Rendered,
    RenderError,
    render,
    render_prompt,
)

__all__ = [
    "ContextTooLongError",
    "Conversation",
    "RenderError",
    "Rendered",
    "render",
    "render_prompt",
]
