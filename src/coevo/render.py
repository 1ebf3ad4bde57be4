"""Chat rendering: the one place text meets tokens, for training and for generation alike.

`render(trajectory, tokenizer)` gives the token ids of a whole episode and a mask that is 1
exactly on the tokens the agent wrote (its reply text and its end-of-turn token).
`render_prompt(turns, tokenizer)` gives the ids of a generation prompt: the same pieces, then
the assistant header. Both go through `Conversation`, which the rollout loop also uses
incrementally, so training and generation never disagree about the text.

How the pieces add up to the whole: message i's templated text is the chat template applied to
messages[: i + 1] minus the template applied to messages[:i]. An assistant piece is split
further into header | before | reply | end-of-turn | after, and every part is tokenised on its
own, so no sample is ever dropped for a re-tokenisation mismatch: the ids are, by construction,
the concatenation of the pieces. Generation prompts end with the template's generation header,
which must be exactly the header of an assistant piece (checked, with a clear error if not).

Sampled ids: an agent turn that carries the ids the policy sampled (`Turn.token_ids`) is
rendered as header | sampled ids | end-of-turn | after, the sampled ids learned (mask 1) as
they are, the end-of-turn only when the policy did not sample it itself (then mask 0: nothing
was sampled there). The rollout builds its next prompt from the same pieces, so the ids a
trainer sees are exactly those the policy sampled, in exactly the context it sampled them in,
and `Rendered.sampled_logprobs` lines their log-probs up with them (no re-tokenisation drift).

Context budget (`max_length`): the leading system/instruction turns and the newest
action/observation exchange are always kept; the oldest (assistant, user) turn pairs in between
are dropped first. A conversation whose kept turns alone exceed the budget raises
`ContextTooLongError` rather than being cut silently. A generation prompt may drop in blocks
(`Conversation.prompt(..., cut_block=N)`): the cut goes on to the first point where the dropped
pairs' tokens pass a multiple of N, points fixed by the history itself, so that as an episode
grows its cut moves once per N tokens or so instead of at every step, and the prefix a policy
cached (its session) stays valid in between.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from coevo.trajectory import Trajectory, Turn


class RenderError(ValueError):
    """A tokenizer or chat template that cannot render conversations faithfully."""


class ContextTooLongError(RenderError):
    """The turns that must be kept do not fit in `max_length` tokens."""


@dataclass(frozen=True)
class Rendered:
    """Token ids of a conversation and the mask of the agent's own tokens."""

    input_ids: list[int]
    action_mask: list[int]
    """Same length as `input_ids`; 1 exactly on the agent's text and its end-of-turn token."""
    dropped_turns: int = 0
    """How many turns the context budget left out (always whole assistant/user pairs)."""
    sampled_logprobs: list[float] | None = None
    """Same length as `input_ids`: the log-prob each agent token was sampled with, 0.0 on
    every other token; None unless every kept agent turn carries its sampled log-probs."""


@dataclass(frozen=True)
class _Piece:
    """One message's tokens: `ids` and `mask` as it sits in the conversation, and the
    sampled log-probs of its ids (None: an agent turn that did not keep them)."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float] | None


@dataclass(frozen=True)
class _Part:
    """A stretch of a piece: text to tokenise, or ids the policy sampled (with log-probs)."""

    text: str = ""
    learn: int = 0
    ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None


def _messages(turns: Sequence[Turn]) -> list[dict[str, str]]:
    return [{"role": t.role, "content": t.text} for t in turns]


class _Template:
    """A tokenizer's chat template, compiled once; renders like `apply_chat_template`.

    Rendering every prefix of a conversation is the hot path of `render`; going through
    `apply_chat_template` would deep-copy the whole conversation on each call.
    """

    def __init__(self, tokenizer: Any) -> None:
        check_chat_template(tokenizer)
        self.tokenizer = tokenizer
        self.source = tokenizer.chat_template
        self.variables = dict(getattr(tokenizer, "special_tokens_map", {}) or {})
        self.special = _special_strings(tokenizer)
        self._encoded: dict[str, list[int]] = {}
        try:
            from transformers.utils.chat_template_utils import _compile_jinja_template

            compiled = _compile_jinja_template(self.source)
            self.compiled = _remembering_verdicts(compiled, self.source)
        except (ImportError, AttributeError):  # another transformers: take the public road
            self.compiled = None

    def __call__(self, messages: list[dict[str, str]], generation: bool) -> str:
        if not messages:
            return ""
        if self.compiled is None:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation
            )
        return self.compiled.render(
            messages=messages, add_generation_prompt=generation, **self.variables
        )

    def encoded(self, text: str) -> list[int]:
        """The ids of `text` alone (e.g. an end-of-turn marker), tokenised once."""
        if text not in self._encoded:
            self._encoded[text] = _encode_many(self.tokenizer, [text])[0] if text else []
        return self._encoded[text]

    @classmethod
    def of(cls, tokenizer: Any) -> _Template:
        cached = getattr(tokenizer, "_coevo_template", None)
        if cached is not None and cached.source == tokenizer.chat_template:
            return cached
        template = cls(tokenizer)
        with contextlib.suppress(AttributeError):  # cache on the tokenizer: compile once
            tokenizer._coevo_template = template
        return template


def _remembering_verdicts(template: Any, source: str) -> Any:
    """`template` (of `source`) compiled again in an overlay of its sandbox that remembers the
    sandbox's verdict on each (type, attribute) it is asked about (a template's `loop.first`,
    say), so that rendering a conversation asks once, not once per message and render.

    Sound for jinja's `ImmutableSandboxedEnvironment` as it is (the overlay is made only for
    that class): its verdict reads the attribute's name and `isinstance` tests of the object,
    nothing else, so objects of one type get one verdict; an object whose `__class__` is not
    its type is asked anew every time. Every refusal stays a refusal."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = template.environment
    if type(environment) is not ImmutableSandboxedEnvironment:
        return template
    overlay = environment.overlay()
    ask = overlay.is_safe_attribute
    verdicts: dict[tuple[type, str], bool] = {}

    def is_safe_attribute(obj: Any, attr: str, value: Any) -> bool:
        kind = type(obj)
        if obj.__class__ is not kind:
            return ask(obj, attr, value)
        verdict = verdicts.get((kind, attr))
        if verdict is None:
            verdict = verdicts[kind, attr] = ask(obj, attr, value)
        return verdict

    overlay.is_safe_attribute = is_safe_attribute
    return overlay.from_string(source)


def _special_strings(tokenizer: Any) -> list[str]:
    """Special-token strings, longest first, to recognise an end-of-turn marker."""
    strings = set(getattr(tokenizer, "all_special_tokens", []) or [])
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            strings.add(str(token))
    return sorted((s for s in strings if s), key=len, reverse=True)


def _encode_many(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens added, in one batched call."""
    if not texts:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # skip the Python wrapper: same ids, a fraction of the time
        return [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def check_chat_template(tokenizer: Any) -> None:
    """Raise a clear error when `tokenizer` has no chat template."""
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise RenderError(
            f"Tokenizer {name!r} has no chat template: set tokenizer.chat_template to a Jinja "
            "template (or use a checkpoint made by `coevo model init` or an instruct model)."
        )


class Conversation:
    """A conversation tokenised piece by piece, growing one turn at a time.

    `append(turn)` renders only what the new message adds; pieces are tokenised lazily in one
    batch, and `render()` (training layout) and `prompt_ids()` (generation layout) assemble
    the kept pieces under the context budget.
    """

    def __init__(self, tokenizer: Any, turns: Sequence[Turn] = ()) -> None:
        self.tokenizer = tokenizer
        self._template = _Template.of(tokenizer)
        self.turns: list[Turn] = []
        self._messages: list[dict[str, str]] = []
        self._pieces: list[_Piece] = []
        self._pending: list[tuple[list[_Part], bool]] = []  # (parts, keeps log-probs) to tokenise
        self._text = ""  # the templated text of all turns so far
        self._header: str | None = None  # the generation header after the last turn
        self.extend(turns)

    def extend(self, turns: Sequence[Turn]) -> None:
        for turn in turns:
            self.append(turn)

    def append(self, turn: Turn) -> None:
        messages = [*self._messages, {"role": turn.role, "content": turn.text}]
        text = self._template(messages, generation=False)
        if not text.startswith(self._text):
            raise RenderError(
                "The chat template renders earlier messages differently once a new one "
                "follows, so pieces would not add up to the whole: use a prefix-stable "
                "chat template (most instruct templates are)."
            )
        piece_text = text[len(self._text) :]
        if turn.role == "assistant":
            parts = self._assistant_parts(piece_text, turn)
        else:
            parts = [_Part(piece_text)]  # what the agent was shown: never learned
        self.turns.append(turn)
        self._messages = messages
        keeps = turn.role != "assistant" or turn.logprobs is not None
        self._pending.append((parts, keeps))
        self._text = text
        self._header = None

    def _flush(self) -> None:
        tokenize([self])

    def _pending_texts(self) -> list[str]:
        return [p.text for parts, _ in self._pending for p in parts if p.ids is None and p.text]

    def _take(self, encoded: Iterator[list[int]]) -> None:
        """Make pieces of the pending turns, their texts' ids read from `encoded` in order."""
        for parts, keeps in self._pending:
            ids: list[int] = []
            mask: list[int] = []
            logprobs: list[float] = []
            for part in parts:
                if part.ids is not None:
                    part_ids = list(part.ids)
                elif part.text:
                    part_ids = next(encoded)
                else:
                    continue
                ids.extend(part_ids)
                mask.extend([part.learn] * len(part_ids))
                logprobs.extend(part.logprobs or [0.0] * len(part_ids))
            self._pieces.append(_Piece(ids, mask, logprobs if keeps else None))
        self._pending.clear()

    def _generation_header(self) -> str:
        """The text the template adds for an assistant reply after the current turns
        (rendered once per turn: the prompt and the reply that follows it share it)."""
        if self._header is None:
            with_header = self._template(self._messages, generation=True)
            if not with_header.startswith(self._text):
                raise RenderError(
                    "The chat template's generation prompt changes the earlier messages: use "
                    "a template whose add_generation_prompt only appends the assistant header."
                )
            self._header = with_header[len(self._text) :]
        return self._header

    def _assistant_parts(self, piece_text: str, turn: Turn) -> list[_Part]:
        header = self._generation_header()
        if not piece_text.startswith(header):
            raise RenderError(
                f"The chat template writes an assistant message with a header other than its "
                f"generation prompt ({header!r}), so training and generation would see "
                "different text: use a template whose generation prompt matches."
            )
        body = piece_text[len(header) :]
        reply = turn.text
        # Templates may trim the reply (Llama 3 does): find the text as the template wrote it.
        written = reply
        start = body.find(written)
        if start < 0:
            written = reply.strip()
            start = body.find(written)
        if start < 0:
            raise RenderError(
                "The chat template alters the assistant's text beyond trimming it, so its "
                "tokens cannot be masked exactly: use a template that writes the content as is."
            )
        before, after = body[:start], body[start + len(written) :]
        end_of_turn = next((s for s in self._template.special if after.startswith(s)), "")
        after = after[len(end_of_turn) :]
        if turn.token_ids is not None:
            return self._sampled_parts(header, turn, end_of_turn, after)
        # The agent learns its text and the marker that ends its turn (so it learns to stop);
        # the header, anything the template adds around the text, and what follows are given.
        return [
            _Part(header),
            _Part(before),
            _Part(written, learn=1),
            _Part(end_of_turn, learn=1),
            _Part(after),
        ]

    def _sampled_parts(self, header: str, turn: Turn, end_of_turn: str, after: str) -> list[_Part]:
        """The parts of an agent turn from the ids the policy sampled right after `header`.

        Whatever the template writes between the header and the text never reached the
        policy, so it is left out. The end-of-turn marker closes the turn as the template
        does; added (mask 0: not sampled) only when the sampled ids do not already end with it.
        """
        sampled = tuple(turn.token_ids or ())
        parts = [_Part(header), _Part(ids=sampled, learn=1, logprobs=turn.logprobs)]
        end_ids = tuple(self._template.encoded(end_of_turn))
        if end_ids and sampled[-len(end_ids) :] != end_ids:
            parts.append(_Part(ids=end_ids))
        return [*parts, _Part(after)]

    # -- assembling under the budget --------------------------------------------------

    def _kept(self, budget: int | None, extra: int, block: int = 0) -> tuple[list[int], int]:
        """Indices of kept turns and how many were dropped, for `extra` tokens after them;
        with `block`, pairs are dropped on to the next block boundary (module doc)."""
        self._flush()
        n = len(self._pieces)
        keep = list(range(n))
        if budget is None:
            return keep, 0
        lengths = [len(p.ids) for p in self._pieces]
        total = sum(lengths) + extra
        if total <= budget:
            return keep, 0
        head = 0  # leading system turns and the first user turn (the instruction)
        while head < n and self.turns[head].role != "user":
            head += 1
        head = min(head + 1, n)
        last_agent = max((i for i in range(n) if self.turns[i].role == "assistant"), default=n)
        # Droppable: (assistant, user) pairs after the head and before the newest agent turn.
        pairs = []  # the first index of each droppable pair, oldest first
        i = head
        while i + 1 < last_agent:
            if self.turns[i].role == "assistant" and self.turns[i + 1].role == "user":
                pairs.append(i)
                i += 2
            else:
                i += 1
        freed = list(itertools.accumulate(lengths[i] + lengths[i + 1] for i in pairs))
        need = next((k + 1 for k, f in enumerate(freed) if total - f <= budget), None)
        if need is None:
            raise ContextTooLongError(
                f"The instruction and the newest exchange take {total - (freed or [0])[-1]} "
                f"tokens, more than max_length={budget}: raise max_length or shorten the env's "
                "observations."
            )
        if block:
            # On to the first boundary (the dropped tokens pass a multiple of `block`) at or
            # after the pairs that must go, where the history has one yet.
            need = next(
                (
                    k + 1
                    for k in range(need - 1, len(pairs))
                    if freed[k] // block > (freed[k - 1] if k else 0) // block
                ),
                need,
            )
        dropped = {j for i in pairs[:need] for j in (i, i + 1)}
        return [k for k in keep if k not in dropped], len(dropped)

    def render(self, max_length: int | None = None) -> Rendered:
        kept, dropped = self._kept(max_length, 0)
        ids: list[int] = []
        mask: list[int] = []
        logprobs: list[float] | None = []
        for k in kept:
            piece = self._pieces[k]
            ids.extend(piece.ids)
            mask.extend(piece.mask)
            if logprobs is not None and piece.logprobs is not None:
                logprobs.extend(piece.logprobs)
            else:
                logprobs = None
        has_agent = any(self.turns[k].role == "assistant" for k in kept)
        return Rendered(ids, mask, dropped, logprobs if has_agent else None)

    def prompt_ids(self, max_length: int | None = None) -> list[int]:
        """Ids of the generation prompt: kept turns, then the assistant header."""
        return self.prompt(max_length)[0]

    def prompt(self, max_length: int | None = None, cut_block: int = 0) -> tuple[list[int], int]:
        """The generation prompt's ids and how many turns it leaves out to fit the budget
        (dropped in blocks of `cut_block` tokens where it is set: module doc)."""
        header = self._template.encoded(self._generation_header())
        kept, dropped = self._kept(max_length, len(header), cut_block)
        ids: list[int] = []
        for k in kept:
            ids.extend(self._pieces[k].ids)
        ids.extend(header)
        return ids, dropped

    def __len__(self) -> int:
        return len(self.turns)


def tokenize(conversations: Sequence[Conversation]) -> None:
    """Tokenise the pending turns of every conversation in one batched tokenizer call per
    tokenizer (a lockstep rollout's episodes: the tokenizer's threads share the batch)."""
    by_tokenizer: dict[int, list[Conversation]] = {}
    for conversation in conversations:
        if conversation._pending:
            by_tokenizer.setdefault(id(conversation.tokenizer), []).append(conversation)
    for group in by_tokenizer.values():
        texts = [conversation._pending_texts() for conversation in group]
        encoded = iter(_encode_many(group[0].tokenizer, [t for ts in texts for t in ts]))
        for conversation in group:
            conversation._take(encoded)


def render(trajectory: Trajectory, tokenizer: Any, *, max_length: int | None = None) -> Rendered:
    """Token ids of a whole trajectory and the mask of the agent's tokens (see module doc)."""
    return Conversation(tokenizer, trajectory.turns).render(max_length)


def render_prompt(
    turns: Sequence[Turn], tokenizer: Any, *, max_length: int | None = None
) -> list[int]:
    """Ids of a generation prompt: the conversation so far and the assistant header."""
    return Conversation(tokenizer, turns).prompt_ids(max_length)


def end_of_turn_ids(tokenizer: Any) -> list[int]:
    """Token ids that end an assistant turn under this template (for stopping generation)."""
    conv = Conversation(tokenizer, [Turn("user", "hi"), Turn("assistant", "ok")])
    conv._flush()
    piece = conv._pieces[-1]
    marked = [i for i, m in zip(piece.ids, piece.mask, strict=True) if m]
    ok_ids = _encode_many(tokenizer, ["ok"])[0]
    # The reply's own tokens come first in the marked span; what follows is the end of turn.
    ids = set(marked[len(ok_ids) :])
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is not None:
        ids.add(int(eos))
    return sorted(ids)
