"""The speed benchmarks' --device option: what can be checked without a GPU."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from coevo.policy.static_decode import StaticDecoder

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
SCRIPTS = ["model_speed", "dpo_speed", "grpo_speed", "rollout_speed"]


@pytest.fixture
def bench(monkeypatch):
    """Import a benchmark script as a module, the way it imports its neighbours."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module


@pytest.fixture
def gpu_calls(monkeypatch):
    """torch.cuda's calls the benchmarks make, recorded in order instead of run."""
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 1 * 2**20)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 3 * 2**20)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA Test GPU")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda *a: SimpleNamespace(total_memory=80 * 2**30)
    )
    return calls


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_speed_benchmark_takes_a_device_and_defaults_to_the_cpu(bench, name):
    script = bench(name)
    assert script.parse_args([]).device == "cpu"
    assert script.parse_args(["--device", "cuda"]).device == "cuda"
    with pytest.raises(SystemExit):
        script.parse_args(["--device", "tpu"])


@pytest.mark.parametrize("name", SCRIPTS)
def test_cuda_without_a_gpu_stops_with_one_sentence(bench, name, monkeypatch, capsys):
    script = bench(name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--device", "cuda"])
    with pytest.raises(SystemExit) as stop:
        script.main()
    message = str(stop.value.code)
    assert message.startswith("--device cuda needs a CUDA GPU")
    assert "\n" not in message and message.endswith(".")
    assert message.count(". ") == 0  # one sentence


def test_cuda_without_a_gpu_prints_no_traceback():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a GPU machine
    cmd = [sys.executable, str(BENCHMARKS / "model_speed.py"), "--device", "cuda"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()]
    assert "--device cuda needs a CUDA GPU" in out.stderr


def test_a_timed_region_on_cuda_waits_for_the_gpu_at_both_ends(bench, gpu_calls):
    measure = bench("measure")
    with measure.clock("cuda") as took:
        gpu_calls.append("work")
    assert gpu_calls == ["sync", "work", "sync"]
    assert took["wall"] >= 0 and took["cpu"] >= 0


def test_a_timed_region_on_the_cpu_never_touches_cuda(bench, gpu_calls):
    measure = bench("measure")
    with measure.clock("cpu") as took:
        gpu_calls.append("work")
    got = measure.measure(lambda: gpu_calls.append("train"))
    assert gpu_calls == ["work", "train"]
    assert set(took) == {"cpu", "wall"}
    assert set(got) == {"wall", "cpu", "peak_growth_mb"}


def test_measure_on_cuda_syncs_around_the_call_and_reads_the_peak_after_it(bench, gpu_calls):
    measure = bench("measure")
    got = measure.measure(lambda: gpu_calls.append("train"), "cuda")
    train = gpu_calls.index("train")
    assert "reset" in gpu_calls[:train] and gpu_calls[train - 1] == "sync"
    assert gpu_calls[train + 1] == "sync"
    assert got["peak_gpu_mb"] == 3.0 and got["before_gpu_mb"] == 1.0
    assert {"wall", "cpu", "peak_growth_mb"} <= set(got)


def test_the_resident_note_names_what_each_side_found_allocated(bench):
    note = bench("measure").resident_note(
        {"ours": [{"before_gpu_mb": 1030.4}, {"before_gpu_mb": 530.0}], "TRL": [{"wall": 1.0}]}
    )
    assert note.endswith("ours 530 MB")  # the smallest of its runs; TRL's runs had none


def test_ops_counts_forward_backward_and_optimizer_and_leaves_a_paused_part_out(bench):
    ops = bench("measure").Ops()
    w = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([w], fused=True)
    with ops:
        (w * 2).sum().backward()
        after_backward = ops.n
        optimizer.step()
        after_step = ops.n
        with ops.paused():
            torch.ones(4).add_(1).mul_(3)
    assert 0 < after_backward < after_step == ops.n  # the paused ops left out
    with ops:
        torch.ones(2).add_(1)
    assert ops.n == after_step + 2  # torch.ones: one fill_; add_: one


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_children_get_the_device_and_one_gpu(bench, monkeypatch, device):
    measure = bench("measure")
    seen = {}

    def run(cmd, env, **_):
        seen.update(cmd=cmd, env=env)
        return SimpleNamespace(returncode=0, stdout='{"wall": 1.0}\n', stderr="")

    monkeypatch.setattr(measure.subprocess, "run", run)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    got = measure.run_child("x.py", "ours", ["--work", "w"], 2, memory=False, device=device)
    assert got == {"wall": 1.0}
    base = [sys.executable, "x.py", "--child", "ours", "--threads", "2", "--work", "w"]
    if device == "cpu":  # as before the option existed
        assert seen["cmd"] == base and "CUDA_VISIBLE_DEVICES" not in seen["env"]
    else:
        assert seen["cmd"] == [*base, "--device", "cuda"]
        assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "0"


def test_the_machine_line_names_the_gpu_only_on_cuda(bench, gpu_calls):
    machine = bench("machine")
    assert "GPU" not in machine.describe()
    assert "GPU NVIDIA Test GPU (80 GiB)" in machine.describe("cuda")


def test_cuda_runs_are_recorded_apart_from_cpu_runs(bench, gpu_calls, monkeypatch, tmp_path):
    machine = bench("machine")
    grpo = bench("grpo_speed")
    assert machine.results_file("grpo_speed", "cpu") == BENCHMARKS / "results" / "grpo_speed.md"
    monkeypatch.setattr(machine, "RESULTS_DIR", tmp_path)
    grpo.record("a setup", ["| a | row |"], ["a note"], "cuda")
    grpo.record("a setup", ["| a | row |"], ["a note"], "cpu")
    cuda = (tmp_path / "grpo_speed-cuda.md").read_text()
    assert cuda.startswith("# GRPO speed on cuda: coevo vs TRL\n\n## Runs\n")
    assert "NVIDIA Test GPU" in cuda
    assert "NVIDIA" not in (tmp_path / "grpo_speed.md").read_text()


def test_rollout_results_of_cuda_go_to_their_own_file(bench, tmp_path):
    rollout = bench("rollout_speed")
    path = tmp_path / "rollout_speed-cuda.md"
    rollout.write_section("## Pretrained model: m\n\nfigures\n", path)
    rollout.write_top("# Rollout speed on cuda\n\ntop\n", path)
    text = path.read_text()
    assert text.startswith("# Rollout speed on cuda\n\ntop\n")
    assert "## Pretrained model: m\n\nfigures\n" in text


@pytest.mark.gpu
@pytest.mark.slow
def test_rollout_speed_runs_on_cuda(tmp_path):
    cmd = [sys.executable, str(BENCHMARKS / "rollout_speed.py"), "--device", "cuda"]
    cmd += ["--tasks", "2", "--batch-size", "2", "--max-new-tokens", "4", "--no-write"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "transformers `generate`, eager" in out.stdout
    assert out.stdout.strip().splitlines()[-1].startswith("speedup: ")


def decode_lines(bench, model_dir, theirs=False, decode="auto", **options):
    """rollout_speed's decode table (cuda's, run here on the CPU) for two ToyEnv prompts of 4
    new tokens, with a second copy of the model for transformers' rows when `theirs`."""
    from argparse import Namespace

    from coevo.policy.hf import HFPolicy
    from tests.toy_env import ToyEnv

    rollout = bench("rollout_speed")
    policy = HFPolicy(model_dir, dtype="float32", device="cpu", decode=decode)
    copy = rollout.load_copy(model_dir, policy) if theirs else None
    env = ToyEnv()
    args = dict(batch_size=2, max_new_tokens=4, ours_only=not theirs, decode_repeats=1)
    args.update(profile_decode=False)
    args.update(options)
    return rollout.decode_table(policy, copy, env, env.tasks("train"), Namespace(**args))


def test_the_decoding_table_times_ours_and_transformers_on_the_same_prompts(
    bench, nano_model_dir, one_thread
):
    """The cuda-only table, run on the CPU: three ways, every transformers row decodes all."""
    lines = decode_lines(bench, nano_model_dir, theirs=True, decode_repeats=3)
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in rows] == [
        "| coevo `HFPolicy.generate`, eager",
        "| transformers `generate`, eager",
        '| transformers `generate`, `cache_implementation="static"`',
    ]
    for row in rows:
        cells = row.split(" | ")
        fastest, slowest = map(float, cells[-1].strip(" |").split("-"))
        assert fastest <= float(cells[2]) <= slowest  # the median of the timed calls
    for row in rows[1:]:
        cells = row.split(" | ")
        assert cells[3:5] == ["4", "8"]  # decode steps, tokens: 2 prompts x 4
    assert "timed 3 times" in lines[0]
    assert lines[-1].startswith("Ours split, one more call")
    assert "decoding (the call less it)" in lines[-1]  # the eager loop has no advance


def test_the_decoding_table_splits_the_fixed_shape_loop_of_ours(bench, nano_model_dir, one_thread):
    """With decode="static" the split times the loop itself (`Decoding.advance`) apart from
    the prefill and the rest, and puts every method it wrapped back."""
    from coevo.policy.hf import HFPolicy
    from coevo.policy.static_decode import Decoding

    advance, prefill = Decoding.advance, HFPolicy._prefill
    lines = decode_lines(bench, nano_model_dir, decode="static")
    split = lines[-1]
    assert "the decode loop" in split and "ms a step over 3 steps" in split, split
    assert Decoding.advance is advance and HFPolicy._prefill is prefill


def test_the_decoding_profile_counts_what_a_step_runs(bench, nano_model_dir, one_thread):
    """--profile-decode: one more call of ours under torch.profiler; on the CPU its table
    ranks aten operators by their own time, the model's matrix products among them."""
    lines = decode_lines(bench, nano_model_dir, profile_decode=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("Ours profiled"))
    assert "per decode step" in lines[at]
    rows = [line for line in lines[at + 3 :] if line.startswith("| `")]
    assert 1 <= len(rows) <= 12
    names = [row.split("`")[1] for row in rows]
    assert all(name.startswith("aten::") for name in names)
    assert {"aten::addmm", "aten::mm", "aten::linear"} & set(names)
    shares = [int(row.rsplit("|", 2)[1].strip(" %")) for row in rows]
    assert shares == sorted(shares, reverse=True)


def test_the_decoding_table_can_time_ours_alone(bench, nano_model_dir, one_thread):
    lines = decode_lines(bench, nano_model_dir)
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| coevo `HFPolicy.generate`, eager"]


@pytest.mark.slow
def test_lockstep_alone_prints_its_row_and_its_breakdown_and_writes_nothing(tmp_path):
    cmd = [sys.executable, str(BENCHMARKS / "rollout_speed.py"), "--skip-sequential", "--breakdown"]
    cmd += ["--tasks", "2", "--batch-size", "2", "--max-new-tokens", "4"]
    results = BENCHMARKS / "results" / "rollout_speed.md"
    before = results.read_text()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert results.read_text() == before
    assert "| lockstep (rollout), eager |" in out.stdout
    assert "one at a time (ETO)" not in out.stdout
    assert "speedup" not in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    parts = {row.split(" | ")[0][2:]: row.split(" | ") for row in rows}
    assert int(parts["prefill (new tokens of each turn)"][3].rstrip(" |")) >= 1
    assert int(parts["prompt rendering"][3].rstrip(" |")) >= 2  # one per episode and turn


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_the_breakdown_splits_a_fixed_shape_generate(bench, nano_model_dir, one_thread, decode):
    """A lockstep rollout's breakdown: with fixed-shape decoding its decoding is split into the
    decode steps, the host's stop strings and kept sessions, and the rest, adding up to it."""
    from coevo.policy.base import Sampling
    from coevo.policy.hf import HFPolicy
    from coevo.rollout import rollout
    from tests.toy_env import ToyEnv

    speed = bench("rollout_speed")
    policy = HFPolicy(nano_model_dir, dtype="float32", device="cpu", decode=decode)
    env = ToyEnv()
    sampling = Sampling(temperature=1.0, max_new_tokens=6, stop=("\nObservation:",))
    with speed.Breakdown("cpu") as breakdown, speed.clock() as took:
        rollout(policy, ToyEnv, env.tasks("train")[:3], sampling=sampling, progress=False)
    rows = {
        line.split(" | ")[0][2:]: line.split(" | ")
        for line in breakdown.lines(took["wall"])
        if line.startswith("| ") and "---" not in line
    }
    split = [name for name in rows if name.startswith("decoding: ")]
    if decode == "eager":
        assert not split and "decoding (generate less its prefill)" in rows
        return
    assert split == [
        "decoding: the decode steps (the device's, host syncs)",
        "decoding: stop strings, on the host",
        "decoding: sessions kept (one copy of the slots used)",
        "decoding: the rest (sampling set-up, reading tokens back, texts)",
    ]
    generates = int(rows["prefill (new tokens of each turn)"][3].rstrip(" |"))
    assert (
        int(rows["decoding: sessions kept (one copy of the slots used)"][3].rstrip(" |"))
        == generates
    )
    assert (
        int(rows["decoding: the decode steps (the device's, host syncs)"][3].rstrip(" |"))
        >= generates
    )
    seconds = [breakdown.seconds[k] for k in ("loop", "stops", "sessions")]
    assert all(sec > 0 for sec in seconds)
    assert sum(seconds) <= breakdown.seconds["generate"] - breakdown.seconds["prefill"]


def test_the_token_counter_never_makes_a_compiled_decode_step_compile_again(bench, nano_model_dir):
    # The H100 run of 2026-11-26: the counter's hook, traced into the compiled step, guarded
    # on its Python integer, so every decode step compiled anew and the rollouts never ended.
    from torch._dynamo.testing import CompileCounterWithBackend

    from coevo.policy.base import Sampling
    from coevo.policy.hf import HFPolicy
    from coevo.policy.static_decode import StaticDecoder

    rollout = bench("rollout_speed")
    eager = HFPolicy(nano_model_dir, dtype="float32", decode="eager")
    counted = rollout.TokensRun(eager)
    assert counted.counting
    prompts = [[1, 2, 3], [4, 5]]
    eager.generate(prompts, Sampling(max_new_tokens=3, stop=()))
    assert counted.take() > 0

    torch._dynamo.reset()
    static = HFPolicy(nano_model_dir, model=eager.model, dtype="float32", decode="static")
    assert not rollout.TokensRun(static).counting  # its steps run compiled, or replayed
    compiles = CompileCounterWithBackend("aot_eager")
    static.decoder = StaticDecoder(
        static.model, compile=lambda fn: torch.compile(fn, backend=compiles, fullgraph=True)
    )
    # the hook of a counter made before the switch is still on the module: it must not count
    # or guard inside the compiled step
    static.generate(prompts, Sampling(max_new_tokens=6, stop=()))
    static.generate(prompts, Sampling(max_new_tokens=6, stop=()))
    assert compiles.frame_count == 1
    assert static.decoder.fallback is None


def test_dpo_speed_compiles_ours_only(bench, monkeypatch, tmp_path):
    dpo = bench("dpo_speed")
    calls = []
    monkeypatch.setattr(dpo, "run_child", lambda script, which, extra, *a: calls.append(extra))
    args = dpo.parse_args(["--compile", "--device", "cpu"])
    for which in ("ours", "ours-rows", "trl"):
        dpo.child(which, tmp_path, args, "on", "speed")
    assert ["--compile" in extra for extra in calls] == [True, True, False]
    assert not dpo.parse_args([]).compile


def test_model_speed_compiles_ours_only(bench, monkeypatch, tmp_path):
    sft = bench("model_speed")
    calls = []
    monkeypatch.setattr(sft, "run_child", lambda script, which, extra, *a: calls.append(extra))
    args = sft.parse_args(["--compile", "--device", "cpu"])
    for which in ("ours", "trl"):
        sft.child(which, tmp_path, args, "on", False, "on")
    assert ["--compile" in extra for extra in calls] == [True, False]
    assert not sft.parse_args([]).compile


def test_again_times_the_same_lockstep_rollout_twice(bench, monkeypatch, capsys, one_thread):
    """The second run plays what the first did (same tasks, seeds and steps): on cuda with
    decode=graphs it is the rate once the captures exist, the first holds their compiling."""
    rollout = bench("rollout_speed")
    argv = ["rollout_speed.py", "--tasks", "2", "--batch-size", "2", "--max-new-tokens", "4"]
    monkeypatch.setattr(sys, "argv", [*argv, "--skip-sequential", "--again", "--no-write"])
    rollout.main()
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()]
    lockstep = [row for row in rows if row[0].startswith("| lockstep")]
    names = ["| lockstep (rollout), eager", "| lockstep (rollout), eager, again"]
    assert [row[0] for row in lockstep] == names  # the CPU's loop
    first, again = lockstep
    same = [3, 5, 6]  # env steps, tokens run, mean reward (not seconds, nor rates)
    assert [first[i] for i in same] == [again[i] for i in same]
    assert int(first[3]) > 0


def test_an_interrupted_probe_prints_the_ways_it_measured(bench, nano_model_dir, monkeypatch):
    """The GPU kit stops a part at its cap with SIGINT: the probe prints what it has."""
    fused_decode = bench("fused_decode")
    generate = fused_decode.HFPolicy.generate
    calls = []

    def cut_in_the_second_way(policy, *args, **kwargs):
        calls.append(policy.decoder)
        if len(set(map(id, calls))) == 2:
            raise KeyboardInterrupt
        return generate(policy, *args, **kwargs)

    monkeypatch.setattr(fused_decode.HFPolicy, "generate", cut_in_the_second_way)
    lines = []
    monkeypatch.setattr("builtins.print", lambda text, **_: lines.extend(text.splitlines()))
    args = ["--model", str(nano_model_dir), "--batch-size", "3", "--max-new-tokens", "5"]
    with pytest.raises(SystemExit) as stop:
        fused_decode.main([*args, "--repeats", "1"])
    assert stop.value.code == 130
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| as it is"]
    assert lines[-1] == (
        "Cut off by an interrupt in the way 'q/k/v and gate/up fused': the ways above it are whole."
    )


def test_the_decoders_options_reach_the_lockstep_rollout(bench, monkeypatch, capsys, one_thread):
    """`--decoder fuse prefill` (the GPU kit's rollout-options): the rollout decodes with a
    decoder of those options, named in the table; with the eager loop it is refused."""
    rollout = bench("rollout_speed")
    argv = ["rollout_speed.py", "--tasks", "2", "--batch-size", "2", "--max-new-tokens", "4"]
    argv += ["--skip-sequential", "--no-write", "--decoder", "fuse", "prefill"]
    monkeypatch.setattr(sys, "argv", argv)
    made = []
    monkeypatch.setattr(
        rollout, "StaticDecoder", lambda *a, **k: made.append(k) or StaticDecoder(*a, **k)
    )
    with pytest.raises(SystemExit, match="decode static or graphs"):
        rollout.main()  # the CPU's default: the eager loop
    monkeypatch.setenv("COEVO_DECODE", "static")
    rollout.main()
    assert [(k["fuse"], k["prefill"]) for k in made] == [(True, True)]
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("| lockstep (rollout), static (fuse, prefill) |") for line in lines)


def test_grpo_speed_passes_ours_decoding_loop_to_its_child(bench, monkeypatch, tmp_path):
    grpo = bench("grpo_speed")
    calls = []
    monkeypatch.setattr(
        grpo, "run_child", lambda script, which, extra, *a, **k: calls.append(extra)
    )
    grpo.child("ours", tmp_path, grpo.parse_args(["--decode", "eager"]))
    assert calls[-1][calls[-1].index("--decode") + 1] == "eager"
    assert grpo.parse_args([]).decode == "auto"  # graphs on cuda, as a run decodes there


def test_a_failing_profiler_costs_the_decoding_table_nothing(
    bench, nano_model_dir, one_thread, monkeypatch
):
    def broken(device, ours):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(bench("rollout_speed"), "decode_profile", broken)
    lines = decode_lines(bench, nano_model_dir, profile_decode=True)
    assert lines[-1] == (
        "Ours profiled: the profiler failed (RuntimeError: CUPTI_ERROR_NOT_INITIALIZED)."
    )
    assert any(line.startswith("| coevo `HFPolicy.generate`") for line in lines)


def test_the_decode_probes_reply_as_the_model_does(bench, nano_model_dir):
    fused_decode = bench("fused_decode")
    args = ["--model", str(nano_model_dir), "--batch-size", "3", "--max-new-tokens", "5"]
    lines = fused_decode.main([*args, "--repeats", "1"])
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    ways = ["as it is", "q/k/v and gate/up fused", "prefill over slots", "both"]
    assert [r.split(" | ")[0] for r in rows] == [f"| {way}" for way in ways]
    assert all(r.endswith("| none |") for r in rows)  # no fallback: the static loop ran
    assert "decode static" in lines[0]
    splits = [line for line in lines if "Ours split" in line]
    assert [s.split(":")[0] for s in splits] == ways
    assert all("prefill" in s and "the decode loop" in s for s in splits)
    assert [line for line in lines if line.startswith("Replies")] == [
        f"Replies, {way}: 15 of 15 tokens as it is." for way in ways[1:]
    ]
    assert lines[-1] == (  # static: nothing compiled
        "Compiled by each way's calls: "
        + "; ".join(f"{way} 0 graph(s), 0 graph break(s)" for way in ways)
        + "."
    )
