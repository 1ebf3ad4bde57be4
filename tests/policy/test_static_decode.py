"""Fixed-shape decoding (`static_decode`): the eager loop's replies, compiled or not.

On the CPU in float64, where both loops compute the same products (the static one over more,
masked, slots), tokens are equal and log-probs agree to 1e-9.
"""

from __future__ import annotations

import pytest
import torch

from coevo.policy.base import PolicyError, Sampling
from coevo.policy.cache import KvLayout, Prefix, cache_over, fill_prefixes, prefix_buffers
from coevo.policy.hf import HFPolicy, resolve_decode
from coevo.policy.static_decode import StaticDecoder, room_bucket, rows_bucket
from coevo.render import render_prompt
from coevo.trajectory import Turn
from tests.toy_env import ToyEnv


def both(path, dtype="float64", prefill=False, **static) -> tuple[HFPolicy, HFPolicy]:
    """An eager and a static policy over the same module; with `prefill`, the static one's
    decoder runs its prefill over the slots (`StaticDecoder(prefill=True)`)."""
    eager = HFPolicy(path, dtype=dtype, decode="eager")
    fixed = HFPolicy(path, model=eager.model, dtype=dtype, decode="static", **static)
    if prefill:
        fixed.decoder = StaticDecoder(fixed.model, prefill=True)
    return eager, fixed


def varied_prompts(tokenizer) -> list[list[int]]:
    words = ["fig", "apple", "x", "banana split", "cherry"]
    turns = [[Turn("user", f"Type {w}. " * (i + 1))] for i, w in enumerate(words)]
    return [render_prompt(t, tokenizer) for t in turns]


def toy_prompts(tokenizer) -> list[list[int]]:
    env = ToyEnv()
    tasks = env.tasks("train")[:5]
    turns = [[Turn("user", f"{env.instruction_prompt}\n\n{env.reset(t)[0]}")] for t in tasks]
    return [render_prompt(t, tokenizer) for t in turns]


def assert_same(static, eager, tolerance: float = 1e-9) -> None:
    assert [c.token_ids for c in static] == [c.token_ids for c in eager]
    assert [(c.text, c.finish_reason) for c in static] == [(c.text, c.finish_reason) for c in eager]
    for a, b in zip(static, eager, strict=True):
        if b.logprobs is not None:
            assert a.logprobs == pytest.approx(b.logprobs, abs=tolerance)


@pytest.mark.parametrize("prefill", [False, True])
@pytest.mark.parametrize("model", ["nano", "gqa"])
@pytest.mark.parametrize(("dtype", "tolerance"), [("float64", 1e-9), ("float32", 1e-5)])
def test_greedy_replies_equal_the_eager_loops(
    model, dtype, tolerance, prefill, nano_model_dir, gqa_model_dir
):
    """Equal tokens; float32 log-probs differ in the last bits (sums over more slots)."""
    eager, static = both(nano_model_dir if model == "nano" else gqa_model_dir, dtype, prefill)
    prompts = varied_prompts(eager.tokenizer)  # 5 rows of different lengths: 3 pad rows
    for tokens in (1, 2, 24):
        sampling = Sampling(max_new_tokens=tokens, logprobs=True, stop=())
        replies = static.generate(prompts, sampling)
        assert_same(replies, eager.generate(prompts, sampling), tolerance)


@pytest.mark.parametrize("sync_every", [1, 3, 8])
def test_stop_ids_and_stop_strings_end_rows_where_the_eager_loop_does(
    sync_every, toy_agent_dir, nano_model_dir
):
    eager, static = both(toy_agent_dir, sync_every=sync_every)
    prompts = toy_prompts(eager.tokenizer)
    for stop in (("\nObservation:",), ("\nAction:",), ("check",)):  # end of turn, then strings
        sampling = Sampling(max_new_tokens=40, logprobs=True, stop=stop)
        replies = static.generate(prompts, sampling)
        assert_same(replies, eager.generate(prompts, sampling))
        assert {c.finish_reason for c in replies} == {"stop"}
    # A random model's replies run on: stop strings taken from one of them end it mid-block.
    eager, static = both(nano_model_dir, sync_every=sync_every)
    prompts = varied_prompts(eager.tokenizer)
    (reply,) = eager.generate(prompts[:1], Sampling(max_new_tokens=30, stop=()))
    for stop in ((reply.text[9:12],), (reply.text[20:23], "\nTask:")):
        sampling = Sampling(max_new_tokens=30, logprobs=True, stop=stop)
        replies = static.generate(prompts, sampling)
        assert_same(replies, eager.generate(prompts, sampling))
        assert replies[0].finish_reason == "stop" and len(replies[0].token_ids) < 30


@pytest.mark.parametrize("prefill", [False, True])
def test_sampled_replies_with_seeds_equal_the_eager_loops(gqa_model_dir, prefill):
    eager, static = both(gqa_model_dir, prefill=prefill, sync_every=5)
    prompts = varied_prompts(eager.tokenizer)
    seeds = [11, 12, 13, 14, 15]
    for sampling in (
        Sampling(temperature=1.0, max_new_tokens=20, logprobs=True, stop=()),
        Sampling(temperature=0.7, top_p=0.8, max_new_tokens=20, logprobs=True, stop=("x",)),
    ):
        replies = static.generate(prompts, sampling, seeds=seeds)
        assert_same(replies, eager.generate(prompts, sampling, seeds=seeds))
        assert replies != static.generate(prompts, sampling, seeds=[s + 1 for s in seeds])
    # One shared generator (Sampling.seed): the same replies again for the same seed.
    seeded = Sampling(temperature=1.0, max_new_tokens=12, stop=(), logprobs=True, seed=7)
    assert static.generate(prompts, seeded) == static.generate(prompts, seeded)


@pytest.mark.parametrize("prefill", [False, True])
def test_sessions_over_two_turns_give_what_prompts_sent_whole_give(
    toy_agent_dir, monkeypatch, prefill
):
    eager, static = both(toy_agent_dir, prefill=prefill)
    env = ToyEnv()
    tasks = env.tasks("train") + env.tasks("test_unseen")[:3]
    firsts = [[Turn("user", f"{env.instruction_prompt}\n\n{env.reset(t)[0]}")] for t in tasks]
    sampling = Sampling(max_new_tokens=32, logprobs=True)
    keys = [t.id for t in tasks]
    replies = static.generate([render_prompt(t, static.tokenizer) for t in firsts], sampling,
                              sessions=keys)  # fmt: skip
    seconds = [[*t, Turn("assistant", r.text), Turn("user", "Observation: try again.")]
               for t, r in zip(firsts, replies, strict=True)]  # fmt: skip
    prompts = [render_prompt(t, static.tokenizer) for t in seconds]
    fed = []
    owner, name = (static.decoder, "feed") if prefill else (static, "_fed_inputs")
    feed = getattr(owner, name)

    def spy(*args):
        fed.append(args[1].shape[1] if prefill else args[2])  # the ids' width, or `width`
        return feed(*args)

    monkeypatch.setattr(owner, name, spy)
    kept = static.generate(prompts, sampling, sessions=keys)
    assert fed and max(fed) < min(len(p) for p in prompts) // 2  # only the new turns ran
    assert_same(kept, static.generate(prompts, sampling))
    assert_same(kept, eager.generate(prompts, sampling))
    assert_same(kept, eager.generate(prompts, sampling, sessions=keys))


def test_a_compiled_prefill_runs_a_sessions_second_turn(gqa_model_dir):
    """The prefill's cache hands a compiled forward one tensor per buffer: a buffer beside a
    view of it, one of them written, made the compiler fail at the second turn (whose cache
    holds the first turn's tokens). Compiled with symbolic shapes, as turns vary."""
    eager, static = both(gqa_model_dir, dtype="float32")
    static.model = torch.compile(static.model, backend="aot_eager", dynamic=True)
    tokenizer, keys = static.tokenizer, ["a", "b", "c"]
    sampling = Sampling(max_new_tokens=6, logprobs=True)
    firsts = [[Turn("user", f"Type {w}. " * n)] for w, n in (("fig", 1), ("x", 3), ("kiwi", 2))]
    replies = static.generate([render_prompt(t, tokenizer) for t in firsts], sampling,
                              sessions=keys)  # fmt: skip
    seconds = [[*t, Turn("assistant", r.text), Turn("user", "Observation: again.")]
               for t, r in zip(firsts, replies, strict=True)]  # fmt: skip
    prompts = [render_prompt(t, tokenizer) for t in seconds]
    assert_same(static.generate(prompts, sampling, sessions=keys),
                eager.generate(prompts, sampling), tolerance=1e-4)  # fmt: skip


@pytest.mark.parametrize("prefill", [False, True])
def test_sessions_of_rows_that_ended_at_different_steps(gqa_model_dir, prefill):
    eager, static = both(gqa_model_dir, prefill=prefill, sync_every=4)
    prompts = varied_prompts(eager.tokenizer)
    sampling = Sampling(temperature=1.0, max_new_tokens=16, logprobs=True, stop=("e", "a", "o"))
    keys, seeds = list(range(len(prompts))), [1, 2, 3, 4, 5]
    replies = static.generate(prompts, sampling, seeds=seeds, sessions=keys)
    assert len({len(r.token_ids) for r in replies}) > 2
    turn = render_prompt([Turn("user", "Observation: try again.")], eager.tokenizer)
    later = [p + list(r.token_ids) + turn for p, r in zip(prompts, replies, strict=True)]
    assert_same(
        static.generate(later, sampling, seeds=seeds, sessions=keys),
        eager.generate(later, sampling, seeds=seeds),
    )


def counted_decoder(model, **options) -> tuple[StaticDecoder, object]:
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager")  # inductor would take minutes here
    compile = lambda fn: torch.compile(fn, backend=counter, fullgraph=True)  # noqa: E731
    return StaticDecoder(model, compile=compile, **options), counter


def test_the_step_compiles_as_one_graph_reused_across_calls_buckets_and_weight_updates(
    gqa_model_dir,
):
    torch._dynamo.reset()
    eager, static = both(gqa_model_dir)
    static.decoder, counter = counted_decoder(static.model)
    prompts = varied_prompts(eager.tokenizer)
    greedy = Sampling(max_new_tokens=12, logprobs=True, stop=())
    assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy))
    assert counter.frame_count == 1  # fullgraph: a graph break would have raised
    assert static.decoder.fallback is None
    static.generate(prompts, greedy)  # the same bucket
    longer = [p * 30 for p in prompts[:2]]  # another rows bucket and room
    assert_same(static.generate(longer, greedy), eager.generate(longer, greedy))
    sampled = Sampling(temperature=0.9, max_new_tokens=12, logprobs=True, stop=())
    seeds = [1, 2, 3, 4, 5]
    assert_same(
        static.generate(prompts, sampled, seeds=seeds),
        eager.generate(prompts, sampled, seeds=seeds),
    )
    # An optimizer's in-place update: the next call plays the new weights, uncompiled anew.
    with torch.no_grad():
        for p in static.model.parameters():
            p.mul_(1.5)
    assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy))
    assert counter.frame_count == 1


def test_the_prefill_over_slots_compiles_once_for_every_rows_width_and_room(gqa_model_dir):
    """`StaticDecoder(prefill=True)`: one graph for the prefill beside the step's, whatever a
    call feeds: one row or many, a whole prompt or a session's new turn, a prompt fed again
    whole (one uncached token: fed with a cached one), another room; replies as eager's."""
    torch._dynamo.reset()
    eager, static = both(gqa_model_dir)
    static.decoder, counter = counted_decoder(static.model, prefill=True)
    prompts = varied_prompts(eager.tokenizer)
    greedy = Sampling(max_new_tokens=10, logprobs=True, stop=())
    keys = list(range(len(prompts)))
    replies = static.generate(prompts, greedy, sessions=keys)
    assert_same(replies, eager.generate(prompts, greedy))
    assert counter.frame_count == 2  # the step and the prefill, each one graph
    turn = render_prompt([Turn("user", "Observation: try again.")], eager.tokenizer)
    later = [p + list(r.token_ids) + turn for p, r in zip(prompts, replies, strict=True)]
    assert_same(static.generate(later, greedy, sessions=keys), eager.generate(later, greedy))
    again = [p + list(r.token_ids) for p, r in zip(prompts, replies, strict=True)]
    assert_same(static.generate(again, greedy, sessions=keys), eager.generate(again, greedy))
    assert_same(static.generate(prompts[:1], greedy), eager.generate(prompts[:1], greedy))
    longer = [p * 30 for p in prompts[:3]]  # another rows bucket and room
    assert_same(static.generate(longer, greedy), eager.generate(longer, greedy))
    ones = [p[:1] for p in prompts[:2]]  # one token each: transformers' prefill
    assert_same(static.generate(ones, greedy), eager.generate(ones, greedy))
    mixed = [prompts[0][:1], prompts[1]]  # one token beside many: a pad before the one
    assert_same(static.generate(mixed, greedy), eager.generate(mixed, greedy))
    with torch.no_grad():  # an optimizer's in-place update: played, not compiled anew
        for p in static.model.parameters():
            p.mul_(1.5)
    assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy))
    assert counter.frame_count == 2 and static.decoder.fallback is None


@pytest.mark.parametrize("prefill", [False, True])
def test_the_next_model_of_the_same_shape_reuses_the_steps_compilation(gqa_model_dir, prefill):
    """Each stage of a run loads its own checkpoint, a new module with its own decoder: the
    process compiles the step (and the prefill over slots) once (tens of seconds with inductor
    on a GPU), not per stage."""
    torch._dynamo.reset()
    greedy = Sampling(max_new_tokens=8, logprobs=True, stop=())
    compile = None  # the first decoder's (counting) compile, given to the next ones
    for _ in range(3):
        eager, static = both(gqa_model_dir)
        if compile is None:
            static.decoder, counter = counted_decoder(static.model, prefill=prefill)
            compile = static.decoder.compile
        else:
            static.decoder = StaticDecoder(static.model, compile=compile, prefill=prefill)
        prompts = varied_prompts(eager.tokenizer)
        assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy))
        assert counter.frame_count == 1 + prefill and static.decoder.fallback is None


def test_a_step_that_would_compile_again_at_every_call_decodes_uncompiled_saying_why(
    gqa_model_dir,
):
    # The H100 run of 2026-11-26: a forward hook bumping a Python integer on the module, traced
    # into the step, failed its guard at every call: each step compiled anew.
    torch._dynamo.reset()
    eager, static = both(gqa_model_dir)
    static.decoder, counter = counted_decoder(static.model)

    class Calls:
        n = 0

        def __call__(self, module, args, kwargs):
            self.n += 1

    calls = Calls()
    handle = static.model.register_forward_pre_hook(calls, with_kwargs=True)
    prompts = varied_prompts(eager.tokenizer)
    greedy = Sampling(max_new_tokens=8, logprobs=True, stop=())
    try:
        with pytest.warns(UserWarning, match="decode step failed") as caught:
            assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy))
    finally:
        handle.remove()
    assert counter.frame_count == 1  # compiled once, never again
    assert "RecompileError" in static.decoder.fallback
    assert "n ==" in str(caught[0].message)  # the guard that failed, named
    assert static.decoder._forward is not None
    assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy))
    assert counter.frame_count == 1


@pytest.mark.parametrize("fuse", [False, True])
def test_captures_are_kept_per_bucket_and_sampling_and_survive_in_place_updates(
    gqa_model_dir, monkeypatch, fuse
):
    """The bookkeeping around CUDA graphs, with a stand-in on the CPU: `_capture` warms up as
    the real one does (moving the state on), and its graph replays the step."""

    class Replay:
        def __init__(self, decoder: StaticDecoder, args: tuple) -> None:
            self.decoder, self.args = decoder, args

        def replay(self) -> None:
            with self.decoder.stepping():
                self.decoder.step(*self.args)

    def capture(self: StaticDecoder, *args) -> Replay:
        for _ in range(2):
            with self.stepping():
                self.step(*args)
        return Replay(self, args)

    monkeypatch.setattr(StaticDecoder, "_capture", capture)
    eager, static = both(gqa_model_dir)
    static.decoder = StaticDecoder(static.model, capture=True, fuse=fuse)
    prompts = varied_prompts(eager.tokenizer)
    greedy = Sampling(max_new_tokens=12, logprobs=True, stop=())
    sampled = Sampling(temperature=0.9, max_new_tokens=12, logprobs=True, stop=())
    seeds = [1, 2, 3, 4, 5]
    longer = [p * 30 for p in prompts[:2]]
    for calls, captures in (
        ([(prompts, greedy)], 1),
        ([(prompts, greedy)], 1),  # the same bucket and sampling: replayed
        ([(prompts, sampled)], 2),  # another sampling: its own graph
        ([(longer, greedy)], 3),  # another bucket
    ):
        for batch, sampling in calls:
            assert_same(
                static.generate(batch, sampling, seeds=seeds[: len(batch)]),
                eager.generate(batch, sampling, seeds=seeds[: len(batch)]),
            )
        assert static.decoder.captures == captures
    with torch.no_grad():
        for p in static.model.parameters():
            p.mul_(1.5)  # in place, as an optimizer step: the graphs read the new weights
    assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy))
    assert static.decoder.captures == 3
    for p in static.model.parameters():
        p.data = p.data.clone()  # new tensors: the graphs would read the old ones
    assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy))
    assert static.decoder.captures == 4


def test_policies_over_one_module_share_its_decoder(nano_model_dir):
    first = HFPolicy(nano_model_dir, decode="static")
    again = HFPolicy(nano_model_dir, model=first.model, decode="static")
    assert again.decoder is first.decoder
    assert HFPolicy(nano_model_dir, decode="static").decoder is not first.decoder


def test_decode_setting(nano_model_dir, monkeypatch):
    monkeypatch.delenv("COEVO_DECODE", raising=False)
    assert HFPolicy(nano_model_dir, device="cpu").decoder is None  # auto on the CPU: eager
    monkeypatch.setenv("COEVO_DECODE", "static")
    assert HFPolicy(nano_model_dir).decode == "static"
    assert HFPolicy(nano_model_dir, decode="eager").decoder is None  # the argument wins
    monkeypatch.setenv("COEVO_DECODE", "fast")
    with pytest.raises(PolicyError, match="Unknown decode 'fast'.*eager"):
        HFPolicy(nano_model_dir)
    monkeypatch.delenv("COEVO_DECODE")
    # auto: graphs where a device runs CUDA, unless COEVO_DECODE says otherwise.
    assert resolve_decode("auto", torch.device("cuda")) == "graphs"
    assert resolve_decode("auto", torch.device("cpu")) == "eager"
    assert resolve_decode("static", torch.device("cuda")) == "static"
    monkeypatch.setenv("COEVO_DECODE", "eager")
    assert resolve_decode("auto", torch.device("cuda")) == "eager"
    monkeypatch.delenv("COEVO_DECODE")
    with pytest.raises(ValueError, match="sync_every"):
        HFPolicy(nano_model_dir, decode="static", sync_every=0)
    from transformers import AutoModelForCausalLM

    # Other attention functions want other masks than the step's: the eager loop runs them.
    other = AutoModelForCausalLM.from_pretrained(nano_model_dir, attn_implementation="eager")
    assert HFPolicy(nano_model_dir, model=other, dtype="float32", decode="static").decoder is None


def test_buckets():
    assert [rows_bucket(n) for n in (1, 2, 3, 5, 33, 64, 65, 129)] == [2, 2, 4, 8, 64, 64, 128, 192]
    assert [room_bucket(n) for n in (1, 256, 257, 1000)] == [256, 256, 512, 1024]


def test_fill_prefixes_writes_what_prefix_buffers_writes():
    layout = KvLayout(layers=2, kv_heads=3, head_dim=4)

    def blocks():  # two batch caches: one of two rows, one of three
        torch.manual_seed(1)
        return [
            [(torch.randn(rows, 3, 7, 4), torch.randn(rows, 3, 7, 4)) for _ in range(2)]
            for rows in (2, 3)
        ]

    def prefixes(a, b):  # rows from either block, at their own starts (0 tokens: nothing)
        return [Prefix(a, 1, 2, 3), None, Prefix(b, 2, 0, 5), Prefix(a, 0, 4, 2)]

    ends = [6, 6, 5, 8]
    a, b = blocks()
    expected = prefix_buffers(layout, prefixes(a, b), ends, 9, dtype=torch.float32, device="cpu")
    assert all(layer is not None for layer in a + b)  # nothing freed unless asked
    for layer, (k, v) in enumerate(expected):  # row 0: block a's row 1, slots 2-4, at 3-5
        assert torch.equal(k[0, :, 3:6], a[layer][0][1, :, 2:5])
        assert torch.equal(v[3, :, 6:8], a[layer][1][0, :, 4:6])
        assert not k[0, :, :3].any() and not k[1, :, :6].any()  # zeros before
    a, b = blocks()
    given = [(torch.zeros(5, 3, 9, 4), torch.zeros(5, 3, 9, 4)) for _ in range(2)]
    fill_prefixes([(k[:4], v[:4]) for k, v in given], prefixes(a, b), ends, frozenset({id(b)}))
    for (k, v), (ek, ev) in zip(given, expected, strict=True):
        for row, end in enumerate(ends):
            assert torch.equal(k[row, :, :end], ek[row, :, :end])
            assert torch.equal(v[row, :, :end], ev[row, :, :end])
        assert not k[4].any()  # a row past the batch's is left alone
    assert b == [None, None] and all(layer is not None for layer in a)  # b freed, a kept


def test_caches_over_buffers_are_of_one_class():
    """Every prefill's cache has layers of one class, not a class made per call: a compiled
    forward guards on the class, and a new one each call would compile it again each call.
    Their keys and values are their buffers' views; what would replace them is refused."""
    from transformers import LlamaConfig

    config = LlamaConfig(num_hidden_layers=2, num_attention_heads=2, hidden_size=8)
    buffers = [(torch.zeros(2, 2, 6, 4), torch.zeros(2, 2, 6, 4)) for _ in range(2)]
    first, second = (cache_over(config, buffers, length, 0) for length in (3, 5))
    assert {type(layer) for layer in first.layers + second.layers} == {type(first.layers[0])}
    assert second.layers[1].keys.shape[-2] == 5 and second.layers[1].keys.data_ptr() == (
        buffers[1][0].data_ptr()
    )  # over the buffers given, no copy
    with pytest.raises(NotImplementedError, match="keeps its keys in its buffers"):
        second.layers[0].crop(-1)  # a stock method that would be undone at the next read


def test_a_capture_that_fails_once_is_tried_again_and_twice_falls_back_saying_both(
    gqa_model_dir, monkeypatch
):
    """The capture's own retry (CUDA-only code, its decisions run here with `_capture`
    replaced): a second try follows a failed one, and two failures decode uncaptured with
    both reasons, each with the error it was raised while handling."""
    eager, static = both(gqa_model_dir, dtype="float32")
    decoder = static.decoder
    decoder.capture = True
    prompts = varied_prompts(eager.tokenizer)
    greedy = Sampling(max_new_tokens=6, logprobs=True, stop=())
    tries = []

    def capture_once_failing(slots, sampling, stop_ids, keyword):
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("Recompiling function forward_step\nmore lines")
        return "graph"

    monkeypatch.setattr(decoder, "_capture", capture_once_failing)
    slots = decoder.slots(rows_bucket(5), room_bucket(40), static._layout)
    stops = torch.tensor([0])
    assert decoder._graph(slots, greedy, stops, "past_key_values") == ("graph", True)
    assert len(tries) == 2 and decoder.fallback is None and decoder.capture

    def capture_failing(slots, sampling, stop_ids, keyword):
        try:
            raise ValueError("guard failed: room")
        except ValueError:
            raise RuntimeError("capture invalidated")  # noqa: B904 - as torch.cuda.graph does

    monkeypatch.setattr(decoder, "_capture", capture_failing)
    sampled = Sampling(temperature=0.5, max_new_tokens=6, logprobs=True, stop=())
    with pytest.warns(UserWarning, match="decoding without graphs"):
        assert decoder._graph(slots, sampled, stops, "past_key_values") == (None, True)
    assert not decoder.capture
    assert decoder.fallback.count("RuntimeError: capture invalidated") == 2
    assert "ValueError: guard failed: room <- RuntimeError" in decoder.fallback
    # Decoding goes on uncaptured, as the eager loop would.
    assert_same(static.generate(prompts, greedy), eager.generate(prompts, greedy), 1e-4)


def host_ops(policy: HFPolicy, rows: int) -> int:
    """aten ops a second turn's generate over `rows` kept sessions dispatches outside its
    decode steps and the model's forwards: on a GPU, each is host work the device waits on."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from coevo.policy import static_decode

    count = {"ops": 0, "off": 0}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            count["ops"] += not count["off"]
            return func(*args, **(kwargs or {}))

    def uncounted(call):
        def wrapped(*args, **kwargs):
            count["off"] += 1
            try:
                return call(*args, **kwargs)
            finally:
                count["off"] -= 1

        return wrapped

    sampling = Sampling(temperature=1.0, max_new_tokens=4, logprobs=True)
    prompts = [[3 + (r * 5 + j) % 40 for j in range(6 + r % 3)] for r in range(rows)]
    keys = [("ops", rows, r) for r in range(rows)]
    policy.generate(prompts, sampling, seeds=list(range(rows)), sessions=keys)
    nexts = [p + [7, 8, 9] for p in prompts]
    advance, forward = static_decode.Decoding.advance, policy.model.forward
    static_decode.Decoding.advance = uncounted(advance)
    policy.model.forward = uncounted(forward)
    try:
        with Count():
            policy.generate(nexts, sampling, seeds=list(range(rows)), sessions=keys)
    finally:
        static_decode.Decoding.advance = advance
        del policy.model.forward
    return count["ops"]


def test_a_generates_host_work_does_not_grow_with_rows_times_layers(nano_model_dir):
    # Sessions are rows of one shared cache and masks are built whole: a row more adds a few
    # ops (its seed's draws), not a few per layer (views of its keys and values, as once:
    # 12,873 ops a turn at 64 rows on SmolLM2's 30 layers, against 1,168 since).
    policy = HFPolicy(nano_model_dir, dtype="float32", decode="static")
    layers = policy.model.config.num_hidden_layers
    assert layers >= 3  # so that two ops a row and layer (6 a row) would break the bound below
    per_row = (host_ops(policy, 16) - host_ops(policy, 4)) / 12
    assert per_row < 4
