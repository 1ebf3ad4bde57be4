import hashlib

from coevo.seeds import derive, episode_seed, trainer_seed


def test_each_named_part_gets_its_own_seed_and_the_same_one_every_time():
    parts = [("explore", 1), ("explore", 2), ("evolve", 1), ("dpo", 1), ("walk", 0)]
    seeds = [derive(7, *p) for p in parts]
    assert len(set(seeds)) == len(seeds)
    assert seeds == [derive(7, *p) for p in parts]
    assert derive(7, "explore", 1) != derive(8, "explore", 1)
    assert all(0 <= s < 1 << 63 for s in seeds)


def test_a_runs_second_agent_is_not_the_next_seeds_first():
    # seed + 1 made run 0's failure agent the very SFT run of seed 1's target.
    assert trainer_seed(0, "second") != trainer_seed(1)
    assert trainer_seed(3) == 3
    assert 0 <= trainer_seed(3, "dpo", 1) < 1 << 32  # numpy's seeds are 32-bit


def test_episode_seeds_keep_their_values_from_before_the_module():
    # As rollouts seeded their episodes before coevo.seeds existed: blake2b("0|t1|0") >> 1.
    digest = hashlib.blake2b(b"0|t1|0", digest_size=8).digest()
    assert episode_seed(0, "t1", 0) == int.from_bytes(digest, "big") >> 1
