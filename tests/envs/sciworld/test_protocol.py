"""The task protocol's rules and the expert's thoughts, without the simulator."""

from __future__ import annotations

import sys

import pytest

from coevo.envs import SPLITS, EnvError, make
from coevo.envs.sciworld import eto, protocol
from coevo.envs.sciworld.manifest import SHIPPED, manifest_name, protocol_key, read_json_gz
from coevo.envs.sciworld.protocol import TypeStats
from coevo.envs.sciworld.thoughts import thought_for


@pytest.mark.parametrize(
    ("lengths", "expected"),
    [
        ([], 10),  # no gold path measured: the floor
        ([2, 4], 10),  # 2 * 4 = 8 -> 10, the floor
        ([5], 10),  # 10 exactly
        ([8], 20),  # 16 -> next multiple of 5
        ([39, 20], 80),  # the longest path decides: 78 -> 80
        ([41], 85),  # 82 -> 85
        ([60], 120),  # 120 exactly
        ([178], 120),  # the ceiling
    ],
)
def test_budget_rule(lengths: list[int], expected: int) -> None:
    assert protocol.budget(lengths) == expected


def _stats(name: str, lengths: tuple[int, ...]) -> TypeStats:
    return TypeStats(name, lengths, {"train": (), "dev": (), "test": ()})


def test_longest_types_use_the_median_and_break_ties_by_name() -> None:
    stats = [
        _stats("a", (10, 10, 500)),  # one outlier: median 10, not long
        _stats("b", (100, 120, 130)),  # median 120
        _stats("c", (120, 120, 0)),  # median 120: ties with b, c sorts after b
        _stats("d", (119, 119, 119)),
    ]
    assert protocol.longest_types(stats, 2) == ["b", "c"]
    assert protocol.longest_types(stats, 3) == ["b", "c", "d"]


def test_sub_sampling_is_seeded_sorted_and_capped() -> None:
    variations = list(range(100, 175))
    first = protocol.sample_split(variations, 10, split="test_seen", name="find-plant")
    assert first == protocol.sample_split(
        list(reversed(variations)), 10, split="test_seen", name="find-plant"
    )
    assert len(first) == 10 and first == sorted(first) and set(first) <= set(variations)
    # Another type or split draws independently; another seed draws differently.
    assert first != protocol.sample_split(variations, 10, split="test_seen", name="find-animal")
    assert first != protocol.sample_split(
        variations, 10, seed=1, split="test_seen", name="find-plant"
    )
    # Types at or under the cap keep every variation.
    assert protocol.sample_split([3, 1, 2], 10, split="train", name="x") == [1, 2, 3]


def test_gold_sample_is_a_fixed_subset_of_train() -> None:
    train = list(range(62))
    sample = protocol.gold_sample(train, 5, name="grow-plant")
    assert sample == protocol.gold_sample(train, 5, name="grow-plant")
    assert len(sample) == 5 and set(sample) <= set(train)
    assert protocol.gold_sample([4, 2], 5, name="x") == [2, 4]


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("look around", "I look around to see what is here."),
        ("teleport to kitchen", "I need to be in the kitchen, so I go there."),
        ("open door to kitchen", "I open the door to the kitchen."),
        ("focus on metal pot", "The task is about the metal pot, so I focus on it."),
        ("move metal pot to stove", "I move the metal pot to the stove."),
        ("use thermometer in inventory on steam", "I use the thermometer in inventory on the steam to learn more."),
        ("wait1", "I wait for things to change."),
        ("0", "The action was ambiguous; option 0 is the one I meant."),
        ("frobnicate widget", "Next I frobnicate widget."),
    ],
)  # fmt: skip
def test_thoughts(action: str, expected: str) -> None:
    assert thought_for(action) == expected


def test_make_without_the_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import scienceworld` fail, as on a machine without it.
    monkeypatch.setitem(sys.modules, "scienceworld", None)
    with pytest.raises(EnvError, match=r"pip install 'coevo\[sciworld\]'"):
        make("sciworld")


def test_make_without_java_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("scienceworld")
    import shutil

    real_which = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda cmd, *a, **k: None if cmd == "java" else real_which(cmd, *a, **k)
    )
    with pytest.raises(EnvError, match="Java runtime"):
        make("sciworld")


def test_gold_cache_survives_a_cut_line(tmp_path) -> None:
    from coevo.envs.sciworld.manifest import GoldCache, GoldRecord

    path = tmp_path / "gold.jsonl"
    cache = GoldCache(path)
    cache.put(GoldRecord("a", ("look around",), True, 1.0, 1, None, 20))
    cache.put(GoldRecord("b", ("wait",), False, 0.0, 20, "too long", 20))
    with open(path, "a") as f:
        f.write('{"id": "c", "actions": ["lo')  # a crash in the middle of a write
    again = GoldCache(path)
    assert again.get("a") == cache.get("a") and again.get("c") is None
    assert again.invalid_ids() == {"b"}


def test_interleave_round_robins_over_types() -> None:
    from coevo.envs.sciworld.env import interleave

    rows = [
        {"task_name": n, "variation": v} for n, vs in (("b", [5, 6, 7]), ("a", [1, 2])) for v in vs
    ]
    order = [(r["task_name"], r["variation"]) for r in interleave(rows)]
    assert order == [("a", 1), ("b", 5), ("a", 2), ("b", 6), ("b", 7)]


def test_java_tool_options_are_added_then_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from coevo.envs.sciworld.simulator import _java_tool_options

    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xmx1g")
    with _java_tool_options("-XX:hashCode=2"):
        assert os.environ["JAVA_TOOL_OPTIONS"] == "-Xmx1g -XX:hashCode=2"
    assert os.environ["JAVA_TOOL_OPTIONS"] == "-Xmx1g"
    monkeypatch.delenv("JAVA_TOOL_OPTIONS")
    with _java_tool_options("-XX:hashCode=2"):
        assert os.environ["JAVA_TOOL_OPTIONS"] == "-XX:hashCode=2"
    assert "JAVA_TOOL_OPTIONS" not in os.environ


def test_jvm_flags_cap_the_heap_unless_told_not_to() -> None:
    from coevo.envs.sciworld.simulator import DETERMINISM_FLAGS, jvm_flags

    assert jvm_flags("512m", True) == f"-Xmx512m {DETERMINISM_FLAGS}"
    assert jvm_flags("2g", False) == "-Xmx2g"
    assert jvm_flags(None, False) == ""
    for bad in ("512 m", "-1g", "0", "lots"):
        with pytest.raises(EnvError, match="java_heap"):
            jvm_flags(bad, False)


def test_eto_lists_and_budgets_are_etos() -> None:
    """The numbers of ETO's eval_agent/data/sciworld/ files."""
    sizes = {split: sum(map(len, eto.variations(split).values())) for split in SPLITS}
    assert sizes == {"train": 1483, "test_seen": 194, "test_unseen": 211}
    assert all(len(eto.variations(split)) == 24 for split in SPLITS)
    assert set(eto.MAX_STEPS) == set(eto.variations("train")) == set(eto.ETO_NAMES.values())
    assert eto.ETO_NAMES["task-5-chemistry-mix-paint-(secondary-color)"] == (
        "chemistry-mix-paint-secondary-color"
    )
    budgets = eto.MAX_STEPS
    assert budgets["chemistry-mix-paint-secondary-color"] == 15
    assert (budgets["grow-plant"], budgets["lifespan-longest-lived"], budgets["boil"]) == (
        30,
        10,
        100,
    )
    assert min(budgets.values()) == 10 and max(budgets.values()) == 120
    # Left out by ETO: the inclined planes, Mendelian genetics, the unknown melting point.
    for name in ("inclined-plane-determine-angle", "mendelian-genetics-unknown-plant",
                 "measure-melting-point-unknown-substance"):  # fmt: skip
        assert name not in budgets
    unseen = eto.variations("test_unseen")
    assert unseen["boil"] == tuple(range(21, 30)) and unseen["identify-life-stages-2"] == (
        6,
        7,
        8,
        9,
    )
    # ETO's train list shares 54 (type, variation) pairs with its seen test list.
    pairs = {s: {(n, v) for n, vs in eto.variations(s).items() for v in vs} for s in SPLITS}
    assert len(pairs["train"] & pairs["test_seen"]) == 54
    assert (
        not pairs["train"] & pairs["test_unseen"] and not pairs["test_seen"] & pairs["test_unseen"]
    )


def test_each_protocol_has_its_shipped_manifest() -> None:
    # The sampled protocol's key is the one its shipped manifest was made under.
    assert protocol_key("sampled") == "2cb1b19899"
    assert protocol_key("eto") != protocol_key("sampled")
    for splits in protocol.SPLITS:
        assert (SHIPPED / manifest_name("1.2.3", True, splits)).exists()
    shipped = read_json_gz(SHIPPED / manifest_name("1.2.3", True, "eto"))
    counts = {s: sum(t["split"] == s for t in shipped["tasks"]) for s in SPLITS}
    assert counts == {"train": 1483, "test_seen": 194, "test_unseen": 211}
    budgets = {n: t["budget"] for n, t in shipped["types"].items() if not t["excluded"]}
    assert budgets == eto.MAX_STEPS
    assert sum(1 for t in shipped["types"].values() if t["excluded"]) == 6
