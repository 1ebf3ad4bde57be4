"""The bfcl call parser: valid calls, malformed actions and hostile ones (no package needed)."""

from __future__ import annotations

import pytest

from coevo.envs.bfcl.calls import Call, CallSyntaxError, parse_answer, parse_calls


def test_a_list_of_calls_with_literal_arguments():
    calls = parse_calls(
        "[cd(folder='document'), mkdir(dir_name=\"temp\"), mean([1, 2.5, -3]),"
        " post_tweet(content='hi', tags=['#a'], mentions=[]), f(x={'k': (1, None)}, y=True)]"
    )
    assert calls == [
        Call("cd", (), {"folder": "document"}),
        Call("mkdir", (), {"dir_name": "temp"}),
        Call("mean", ([1, 2.5, -3],), {}),
        Call("post_tweet", (), {"content": "hi", "tags": ["#a"], "mentions": []}),
        Call("f", (), {"x": {"k": (1, None)}, "y": True}),
    ]
    assert str(calls[0]) == "cd(folder='document')"
    assert str(calls[2]) == "mean([1, 2.5, -3])"


def test_a_bare_call_a_tuple_a_fence_and_several_lines():
    assert parse_calls("ls(a=True)") == [Call("ls", (), {"a": True})]
    assert parse_calls("  pwd() , ls()  ") == [Call("pwd"), Call("ls")]
    fenced = "```python\n[\n  cd(folder='a'),\n  ls()\n]\n```"
    assert parse_calls(fenced) == [Call("cd", (), {"folder": "a"}), Call("ls")]
    assert parse_calls("```[ls()]```") == [Call("ls")]


def test_answers():
    assert parse_answer("answer[The file is moved.]") == "The file is moved."
    assert parse_answer(" Answer [ two\nlines ] ") == "two\nlines"
    assert parse_answer("answer[]") == ""
    assert parse_answer("answer the user") is None
    assert parse_answer("[cd(folder='answer')]") is None


@pytest.mark.parametrize(
    "action",
    [
        "",
        "[",
        "cd(",
        "cd folder",
        "click[no such button 9f3a]",
        "frobnicate the quantum widget",
        "☃ ünïcödé ✓ 漢字",
        "x" * 10_000,
        "\x00\x01 \ufffd garbage ]][[",
        "[cd(folder='a') ls()]",
        "1 + 2",
        "'just a string'",
        "[ls(), 42]",
        "cd(folder='a', folder='b')",
        "9" * 5_000,  # more digits than Python converts
    ],
)
def test_malformed_actions_are_syntax_errors_with_a_message(action: str):
    with pytest.raises(CallSyntaxError) as caught:
        parse_calls(action)
    assert str(caught.value)


def test_an_empty_list_says_how_to_end_the_turn():
    with pytest.raises(CallSyntaxError, match=r"answer\["):
        parse_calls("[]")


def test_deep_nesting_is_an_error_not_a_crash():
    for action in ("[" * 100_000 + "]" * 100_000, "f(x=" + "[" * 5_000 + "]" * 5_000 + ")"):
        with pytest.raises(CallSyntaxError):
            parse_calls(action)


@pytest.mark.parametrize(
    "action",
    [
        "__import__('os').system('touch /tmp/coevo-pwned')",
        "os.system('ls')",
        "[ls(), os.remove('x')]",
        "(lambda: 1)()",
        "cd(folder=__import__('os').getcwd())",
        "cd(folder=open('/etc/passwd').read())",
        "cd(*['a'])",
        "cd(**{'folder': 'a'})",
        "().__class__.__bases__[0].__subclasses__()",
        "print.__self__.exec('1')",
        "cd(folder='a' + 'b')",
        "cd(folder=f'{1}')",
        "cd(folder=x)",
        "cd(folder=ls())",
        "getattr(ls, '__globals__')()",
        "_load_scenario({})",
        "__class__()",
        "fns[0](x=1)",
        "[f for f in ()]",
    ],
)
def test_hostile_actions_are_refused_before_anything_runs(action: str):
    with pytest.raises(CallSyntaxError):
        parse_calls(action)


def test_builtin_names_parse_as_calls_for_the_back_end_to_refuse():
    # A bare name is just a name here: whether it is a tool is the back-end's question, and
    # the env test checks that `exec` and friends are refused there.
    assert parse_calls("exec('import os')") == [Call("exec", ("import os",), {})]
