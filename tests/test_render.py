"""Rendering: masks cover exactly the agent's text, pieces add up, budgets drop the oldest."""

from __future__ import annotations

from itertools import pairwise

import pytest

from coevo.lengths import common_prefix
from coevo.policy.tiny import CHAT_TEMPLATE, SPECIAL_TOKENS, train_tokenizer
from coevo.render import (
    ContextTooLongError,
    Conversation,
    RenderError,
    _Template,
    end_of_turn_ids,
    render,
    render_prompt,
    tokenize,
)
from coevo.trajectory import Task, Trajectory, Turn

# Written here in the style of the families' public templates (no downloads).
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
QWEN_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful "
    "assistant.<|im_end|>\n{% endif %}{% for message in messages %}<|im_start|>"
    "{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "Thought: I should search for shoes.\nAction: search[red shoes]",
    "Observation: [Back to Search] Page 1 (Total results: 3) B0001 Red running shoe $42.00",
    "You are a shopping assistant. Actions: search[query], click[label]. Café naïve 中文",
    "assistant user system helpful",
] * 5

TEMPLATES = {
    "tiny": dict(special_tokens=SPECIAL_TOKENS, chat_template=CHAT_TEMPLATE, eos_token="<|end|>"),
    "llama3": dict(
        special_tokens=(
            "<|begin_of_text|>",
            "<|eot_id|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|pad|>",
        ),
        chat_template=LLAMA3_TEMPLATE,
        eos_token="<|eot_id|>",
    ),
    "qwen": dict(
        special_tokens=("<|im_start|>", "<|im_end|>", "<|endoftext|>"),
        chat_template=QWEN_TEMPLATE,
        eos_token="<|im_end|>",
    ),
}
END_OF_TURN = {"tiny": "<|end|>", "llama3": "<|eot_id|>", "qwen": "<|im_end|>"}


@pytest.fixture(scope="module", params=sorted(TEMPLATES))
def tokenizer(request):
    spec = TEMPLATES[request.param]
    pad = "<|pad|>" if "<|pad|>" in spec["special_tokens"] else "<|endoftext|>"
    tok = train_tokenizer(CORPUS, vocab_size=400, pad_token=pad, **spec)
    if request.param == "llama3":
        tok.bos_token = "<|begin_of_text|>"
    tok.family = request.param
    return tok


def trajectory(n_exchanges: int = 3) -> Trajectory:
    task = Task("shop/train/1", "shop", "train", "Buy red shoes.", {})
    turns = [Turn("user", "You are a shopping assistant.\n\nInstruction: buy red shoes")]
    replies = [
        "Thought: I should search.\nAction: search[red shoes]",
        " Thought: leading space, café 中文 and the word assistant.\nAction: click[B0001]",
        "Thought: trailing newline\nAction: click[buy now]\n",
    ]
    for i in range(n_exchanges):
        turns.append(Turn("assistant", replies[i % len(replies)] + (f" #{i}" if i >= 3 else "")))
        turns.append(Turn("user", f"Observation: page {i} with Red running shoe $42.00"))
    turns.append(Turn("assistant", "Thought: done.\nAction: click[buy now]"))
    return Trajectory(task, "t", tuple(turns), 1.0, True, False, n_exchanges + 1)


def masked_spans(ids: list[int], mask: list[int]) -> list[list[int]]:
    spans, current = [], []
    for i, m in zip(ids, mask, strict=True):
        if m:
            current.append(i)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    return spans


def expected_agent_text(tok, text: str) -> str:
    # The Llama-3 template trims message content; the mask covers the text as written.
    written = text.strip() if tok.family == "llama3" else text
    return written + END_OF_TURN[tok.family]


def test_mask_decodes_to_exactly_the_agent_text(tokenizer):
    traj = trajectory()
    out = render(traj, tokenizer)
    assert len(out.input_ids) == len(out.action_mask)
    spans = [tokenizer.decode(s) for s in masked_spans(out.input_ids, out.action_mask)]
    assert spans == [expected_agent_text(tokenizer, t) for t in traj.agent_texts]


def test_pieces_add_up_to_the_templated_text(tokenizer):
    traj = trajectory()
    messages = [{"role": t.role, "content": t.text} for t in traj.turns]
    whole = tokenizer.apply_chat_template(messages, tokenize=False)
    assert tokenizer.decode(render(traj, tokenizer).input_ids) == whole


def test_generation_prompts_are_prefixes_of_the_training_ids(tokenizer):
    traj = trajectory()
    ids = render(traj, tokenizer).input_ids
    for k, turn in enumerate(traj.turns):
        if turn.role != "assistant":
            continue
        prompt = render_prompt(traj.turns[:k], tokenizer)
        assert ids[: len(prompt)] == prompt
        messages = [{"role": t.role, "content": t.text} for t in traj.turns[:k]]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert tokenizer.decode(prompt) == text


def test_incremental_conversation_matches_one_shot_prompts(tokenizer):
    traj = trajectory()
    conv = Conversation(tokenizer)
    for k, turn in enumerate(traj.turns):
        conv.append(turn)
        assert conv.prompt_ids() == render_prompt(traj.turns[: k + 1], tokenizer)
        assert conv.prompt(len(conv.prompt_ids()))[1] == 0
        budget = len(conv.prompt_ids()) - 1
        try:
            expected = render_prompt(traj.turns[: k + 1], tokenizer, max_length=budget)
        except ContextTooLongError:
            with pytest.raises(ContextTooLongError):
                conv.prompt_ids(max_length=budget)
        else:
            assert conv.prompt_ids(max_length=budget) == expected
            assert conv.prompt(budget)[1] > 0  # one token less: a pair of turns left out


def test_tokenizing_conversations_together_gives_each_its_own_ids(tokenizer):
    # A lockstep rollout tokenises every episode's new turns in one call: each conversation
    # must come out as if it had been tokenised alone, whatever each had pending.
    traj = trajectory(n_exchanges=4)
    other = train_tokenizer(CORPUS, vocab_size=300, **TEMPLATES["tiny"])
    together = [Conversation(tokenizer), Conversation(tokenizer), Conversation(other)]
    for k, turn in enumerate(traj.turns):
        together[0].append(turn)
        if k % 2:  # the second gets two turns at a time, the third has its own tokenizer
            together[1].extend(traj.turns[k - 1 : k + 1])
        together[2].append(turn)
        tokenize(together)
        for conv, tok in zip(together, (tokenizer, tokenizer, other), strict=True):
            alone = Conversation(tok, conv.turns)
            assert conv.prompt_ids() == alone.prompt_ids()
            assert conv.render() == alone.render()
    assert together[0].render() == render(traj, tokenizer)


def test_end_of_turn_ids_name_the_template_marker(tokenizer):
    marker = tokenizer.convert_tokens_to_ids(END_OF_TURN[tokenizer.family])
    assert marker in end_of_turn_ids(tokenizer)


def test_budget_keeps_instruction_and_drops_oldest_pairs_first(tokenizer):
    traj = trajectory(n_exchanges=6)
    full = render(traj, tokenizer)
    budget = len(full.input_ids) - 1
    out = render(traj, tokenizer, max_length=budget)
    assert len(out.input_ids) <= budget
    assert out.dropped_turns == 2
    # The oldest exchange (agent turn 1 and its observation) is what went.
    kept = Trajectory(
        traj.task, "t", (traj.turns[0], *traj.turns[3:]), 1.0, True, False, traj.steps
    )
    assert out.input_ids == render(kept, tokenizer).input_ids
    spans = [tokenizer.decode(s) for s in masked_spans(out.input_ids, out.action_mask)]
    assert spans == [expected_agent_text(tokenizer, t) for t in kept.agent_texts]


def test_budget_drops_as_many_pairs_as_needed_and_keeps_the_newest(tokenizer):
    traj = trajectory(n_exchanges=6)
    minimal = Trajectory(
        traj.task, "t", (traj.turns[0], traj.turns[-1]), 1.0, True, False, traj.steps
    )
    need = len(render(minimal, tokenizer).input_ids)
    out = render(traj, tokenizer, max_length=need)
    assert out.dropped_turns == 12
    assert out.input_ids == render(minimal, tokenizer).input_ids
    with pytest.raises(ContextTooLongError, match="max_length"):
        render(traj, tokenizer, max_length=need - 1)


def test_prompt_budget_keeps_the_newest_observation(tokenizer):
    turns = trajectory(n_exchanges=6).turns[:-1]  # ends with an observation
    full = render_prompt(turns, tokenizer)
    short = render_prompt(turns, tokenizer, max_length=len(full) - 1)
    assert len(short) < len(full)
    assert short == render_prompt((turns[0], *turns[3:]), tokenizer)


def test_tokenizer_without_chat_template_gets_a_clear_error():
    tok = train_tokenizer(CORPUS, vocab_size=300)
    tok.chat_template = None
    with pytest.raises(RenderError, match="has no chat template"):
        render(trajectory(), tok)


def test_template_that_rewrites_content_is_refused():
    tok = train_tokenizer(
        CORPUS,
        vocab_size=300,
        chat_template=CHAT_TEMPLATE.replace("content']", "content'] | upper"),
    )
    with pytest.raises(RenderError, match="alters the assistant's text"):
        render(trajectory(), tok)


def sampled_turn(tokenizer, text: str, ids: list[int]) -> Turn:
    logprobs = tuple(-0.25 * (i + 1) for i in range(len(ids)))
    return Turn("assistant", text, token_ids=tuple(ids), logprobs=logprobs)


def test_sampled_ids_are_rendered_as_sampled_in_the_context_they_were_sampled_in(tokenizer):
    traj = trajectory()
    eot = tokenizer.convert_tokens_to_ids(END_OF_TURN[tokenizer.family])
    # Ids that are not the tokenisation of the turn's text: what the policy sampled wins.
    other = tokenizer.encode("Thought: I sampled this.", add_special_tokens=False)
    turns = list(traj.turns)
    turns[1] = sampled_turn(tokenizer, turns[1].text, [*other, eot])  # it ended its own turn
    turns[3] = sampled_turn(tokenizer, turns[3].text, other[:3])  # a stop string cut it
    sampled = Trajectory(traj.task, "t", tuple(turns), 1.0, True, False, traj.steps)
    out = render(sampled, tokenizer)
    spans = masked_spans(out.input_ids, out.action_mask)
    assert spans[:2] == [[*other, eot], other[:3]]
    assert [tokenizer.decode(s) for s in spans[2:]] == [
        expected_agent_text(tokenizer, t) for t in sampled.agent_texts[2:]
    ]
    # The cut turn is closed by the template's marker, which nothing sampled: not learned.
    ends = [
        i for i in range(1, len(out.action_mask)) if out.action_mask[i - 1] > out.action_mask[i]
    ]
    assert (out.input_ids[ends[1]], out.action_mask[ends[1]]) == (eot, 0)
    assert out.sampled_logprobs is None  # not every agent turn kept its log-probs
    # Every generation prompt is still a prefix of the training ids, and the incremental
    # conversation the rollout keeps builds the same prompts.
    conv = Conversation(tokenizer)
    for k, turn in enumerate(turns):
        if turn.role == "assistant":
            prompt = render_prompt(turns[:k], tokenizer)
            assert out.input_ids[: len(prompt)] == prompt == conv.prompt_ids()
        conv.append(turn)


def test_sampled_logprobs_line_up_with_the_agent_tokens(tokenizer):
    traj = trajectory()
    turns = [
        sampled_turn(tokenizer, t.text, tokenizer.encode(t.text, add_special_tokens=False))
        if t.role == "assistant"
        else t
        for t in traj.turns
    ]
    out = render(Trajectory(traj.task, "t", tuple(turns), 1.0, True, False, 4), tokenizer)
    assert out.sampled_logprobs is not None
    assert len(out.sampled_logprobs) == len(out.input_ids)
    learned = [lp for lp, m in zip(out.sampled_logprobs, out.action_mask, strict=True) if m]
    assert learned == [lp for t in turns if t.role == "assistant" for lp in t.logprobs]
    assert all(
        lp == 0.0 for lp, m in zip(out.sampled_logprobs, out.action_mask, strict=True) if not m
    )
    assert render(traj, tokenizer).sampled_logprobs is None  # turns without sampled ids


def growing_prompts(tokenizer, budget: int, cut_block: int, exchanges: int = 14):
    """The generation prompts of an episode played to `exchanges` observations, each step's
    prompt with `budget`, and how many turns each left out."""
    traj = trajectory(n_exchanges=exchanges)
    conv = Conversation(tokenizer)
    conv.append(traj.turns[0])
    prompts = [conv.prompt(budget, cut_block)]
    for agent, observation in zip(traj.turns[1::2], traj.turns[2::2], strict=False):
        conv.extend([agent, observation])
        prompts.append(conv.prompt(budget, cut_block))
    return prompts


def test_cutting_in_blocks_keeps_the_cached_prefix_for_several_steps(tokenizer):
    whole = growing_prompts(tokenizer, None, 0)
    budget = len(whole[5][0])  # the episode outgrows it from its sixth step on
    step = len(whole[6][0]) - len(whole[5][0])  # tokens an exchange adds
    minimal = growing_prompts(tokenizer, budget, 0)
    blocks = growing_prompts(tokenizer, budget, 3 * step)
    for ids, dropped in [*minimal, *blocks]:
        assert len(ids) <= budget and dropped % 2 == 0  # whole (agent, observation) pairs
    # Dropping just what must go moves the cut at almost every step past the budget (9 here);
    # in blocks of about three exchanges about once every three steps, and never back.
    moves = [sum(a[1] != b[1] for a, b in pairwise(p)) for p in (minimal, blocks)]
    assert moves[0] >= sum(d > 0 for _, d in minimal) - 2 and moves[0] > 2 * moves[1] > 0
    cuts = [d for _, d in blocks]
    assert cuts == sorted(cuts) and all(
        b >= m for (_, b), (_, m) in zip(blocks, minimal, strict=True)
    )

    # So a policy that caches each episode's prefix prefills fewer tokens again.
    def prefilled(prompts):
        return sum(len(b) - common_prefix(a, b) for (a, _), (b, _) in pairwise(prompts))

    assert prefilled(blocks) < prefilled(minimal)
    # Under the budget nothing changes, and without a block it is what it always was.
    assert blocks[:6] == minimal[:6] == whole[:6]
    assert [p for p, _ in minimal] == [
        render_prompt(trajectory(14).turns[: 1 + 2 * k], tokenizer, max_length=budget)
        for k in range(len(minimal))
    ]


SANDBOX_PROBES = [
    "{{ messages.pop() }}",  # a list's mutating method
    "{{ messages[0].clear() }}",  # a dict's
    "{{ ''.__class__.__mro__ }}",  # Python's internals
    "{% for m in messages %}{{ m.pop('role') }}{% endfor %}",
    "{% for m in messages %}{{ m.items() | list }}{{ loop.first }}{% endfor %}",  # allowed
]


@pytest.mark.parametrize("template", SANDBOX_PROBES)
def test_the_sandbox_refuses_and_allows_as_transformers_does(template):
    """Rendering remembers the sandbox's verdicts (`_remembering_verdicts`): each template
    renders, or is refused with jinja's SecurityError, exactly as `apply_chat_template` does,
    asked twice (the second time from remembered verdicts)."""
    tok = train_tokenizer(CORPUS, vocab_size=300, chat_template=template)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]

    def outcome(render_once):
        try:
            return "ok", render_once()
        except Exception as exc:  # noqa: BLE001 - the outcome compared, whatever it is
            return type(exc).__name__, str(exc)

    theirs = outcome(lambda: tok.apply_chat_template(messages, tokenize=False))
    ours = _Template.of(tok)
    for _ in range(2):
        assert outcome(lambda: ours(messages, generation=False)) == theirs
    assert messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


def test_the_sandbox_is_asked_once_per_type_and_attribute(monkeypatch):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    asked = []
    verdict = ImmutableSandboxedEnvironment.is_safe_attribute

    def counted(self, obj, attr, value):
        asked.append((type(obj).__name__, attr))
        return verdict(self, obj, attr, value)

    monkeypatch.setattr(ImmutableSandboxedEnvironment, "is_safe_attribute", counted)
    tok = train_tokenizer(CORPUS, vocab_size=300, chat_template=CHAT_TEMPLATE)
    tok.chat_template = "{% for m in messages %}{{ loop.first }}{{ m.get('role') }}{% endfor %}"
    template = _Template.of(tok)
    messages = [{"role": "user", "content": str(i)} for i in range(6)]
    for _ in range(3):
        assert template(messages, generation=False) == "Trueuser" + "Falseuser" * 5
    assert sorted(asked) == [("LoopContext", "first"), ("dict", "get")]


def test_an_object_whose_class_is_not_its_type_is_asked_every_time(monkeypatch):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from coevo.render import _remembering_verdicts

    class Disguised:  # `__class__` says list: isinstance would follow it
        __class__ = list
        pop = None

    asked = []
    verdict = ImmutableSandboxedEnvironment.is_safe_attribute
    monkeypatch.setattr(
        ImmutableSandboxedEnvironment,
        "is_safe_attribute",
        lambda self, obj, attr, value: asked.append(attr) or verdict(self, obj, attr, value),
    )
    source = "{{ thing.pop }}"
    template = _remembering_verdicts(ImmutableSandboxedEnvironment().from_string(source), source)
    for _ in range(3):
        template.render(thing=Disguised())
    assert asked == ["pop"] * 3
