"""ServerPolicy against a local OpenAI-compatible completions server written in the test.

The server answers with an HFPolicy over the same checkpoint, so a rollout through HTTP must
give exactly the episodes the in-process policy gives. Like vLLM it lists what it serves
(`GET /v1/models`, each model's `root` the path it was loaded from) and loads LoRA adapters at
run time (`POST /v1/load_lora_adapter`, then requests name the adapter): a `coevo run` on the
server backend, whose stages train LoRA adapters, plays what the in-process run plays.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from coevo.policy.base import PolicyError, Sampling
from coevo.policy.hf import HFPolicy
from coevo.policy.server import ServerPolicy
from coevo.rollout import rollout
from tests.toy_env import ToyEnv


class Completions(BaseHTTPRequestHandler):
    """POST /v1/completions with token-id prompts, answered by `server.policy`."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        served = {"toy": str(self.server.policy.path), **self.server.roots}
        self.answer({"data": [{"id": name, "root": root} for name, root in served.items()]})

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/test_reload"):  # what a user's reload command does
            with self.server.lock:
                self.server.policy = HFPolicy(body["model"], dtype="float64")
            self.answer({})
            return
        if self.path.endswith("/load_lora_adapter"):  # vLLM's runtime adapter loading
            name, path = body["lora_name"], body["lora_path"]
            with self.server.lock:
                self.server.adapters[name] = HFPolicy(
                    self.server.policy.path, adapter=path, dtype="float64"
                )
            self.server.roots[name] = path
            payload = f"Success: LoRA adapter '{name}' added successfully.".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.server.bodies.append(body)
        if self.server.fail:
            self.send_response(self.server.fail)
            self.end_headers()
            self.wfile.write(b"model not loaded")
            return
        sampling = Sampling(
            temperature=body["temperature"],
            top_p=body["top_p"],
            max_new_tokens=body["max_tokens"],
            stop=tuple(body.get("stop", ())),
            logprobs=bool(body.get("logprobs")),
        )
        seeds = [body["seed"]] if "seed" in body else None
        policy = self.server.adapters.get(body["model"], self.server.policy)
        with self.server.lock:
            (c,) = policy.generate([body["prompt"]], sampling, seeds=seeds)
        choice = {"index": 0, "text": c.text, "finish_reason": c.finish_reason}
        if c.logprobs is not None:
            tokens = [f"token_id:{t}" for t in c.token_ids]
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": list(c.logprobs)}
        self.answer({"object": "text_completion", "choices": [choice]})

    def answer(self, reply: dict) -> None:
        payload = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(toy_agent_dir):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Completions)
    httpd.policy = HFPolicy(toy_agent_dir, dtype="float64")
    httpd.lock, httpd.bodies, httpd.fail = threading.Lock(), [], 0
    httpd.adapters, httpd.roots = {}, {}  # loaded LoRA adapters by name, and their paths
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


@pytest.fixture
def client(server, toy_agent_dir):
    server.bodies.clear()
    server.fail = 0
    url = f"http://127.0.0.1:{server.server_port}/v1"
    return ServerPolicy(url, "toy", tokenizer=toy_agent_dir, max_context=1024)


def texts_and_ids(trajectory) -> list[tuple]:
    return [(t.role, t.text, t.token_ids) for t in trajectory.turns]


def test_rollout_through_the_server_equals_the_local_policy(server, client):
    tasks = ToyEnv().tasks("test_seen")[:4]
    sampling = Sampling(max_new_tokens=24, logprobs=True)
    remote = rollout(client, ToyEnv, tasks, sampling=sampling, batch_size=4, progress=False)
    local = rollout(server.policy, ToyEnv, tasks, sampling=sampling, batch_size=4,
                    cache=False, progress=False)  # fmt: skip
    # The same episodes, sampled ids included; the log-probs agree to float rounding (the
    # server prefills one prompt at a time, the local policy a padded batch of four).
    assert [(texts_and_ids(t), t.reward, t.steps) for t in remote] == [
        (texts_and_ids(t), t.reward, t.steps) for t in local
    ]
    for r, m in zip(remote, local, strict=True):
        for a, b in zip(r.turns, m.turns, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-9)
    assert len(server.bodies) == sum(t.steps for t in remote) > len(tasks)  # one per step
    assert all(isinstance(b["prompt"], list) and b["prompt"] for b in server.bodies)


def test_request_carries_the_sampling_and_each_rows_seed(server, client):
    prompts = [[1, 2, 3], [4, 5]]
    sampling = Sampling(temperature=0.7, top_p=0.9, max_new_tokens=5, logprobs=True)
    out = client.generate(prompts, sampling, seeds=[11, 12])
    bodies = sorted(server.bodies, key=lambda b: b["seed"])
    assert [b["prompt"] for b in bodies] == prompts
    assert [b["seed"] for b in bodies] == [11, 12]
    assert bodies[0]["stop"] == list(sampling.stop)
    assert (bodies[0]["max_tokens"], bodies[0]["temperature"], bodies[0]["top_p"]) == (5, 0.7, 0.9)
    for c in out:  # token ids parsed from "token_id:<id>", one log-prob each
        assert c.token_ids is not None and len(c.token_ids) == len(c.logprobs) > 0


def test_greedy_requests_send_no_seed_and_no_logprobs_unless_asked(server, client):
    client.generate([[1, 2, 3]], Sampling(max_new_tokens=3), seeds=[5])
    (body,) = server.bodies
    assert "seed" not in body and "logprobs" not in body and body["temperature"] == 0


def test_server_error_names_the_status(server, client):
    server.fail = 503
    with pytest.raises(PolicyError, match="503.*model not loaded"):
        client.generate([[1, 2]], Sampling(max_new_tokens=2))


def test_unreachable_server_names_the_fix(toy_agent_dir):
    policy = ServerPolicy("http://127.0.0.1:9/v1", "x", tokenizer=toy_agent_dir, max_context=64)
    with pytest.raises(PolicyError, match="Cannot reach .*start the server"):
        policy.generate([[1]], Sampling(max_new_tokens=1))


def test_missing_tokenizer_names_the_fix(tmp_path):
    with pytest.raises(PolicyError, match="No tokenizer"):
        ServerPolicy("http://127.0.0.1:9/v1", "x", tokenizer=tmp_path / "nothing")


def test_a_run_on_the_server_backend_plays_what_the_in_process_run_plays(
    server, toy_agent_dir, tmp_path, one_thread
):
    """ETO, one iteration, LoRA in every stage: the server loads each stage's adapter (the DPO
    stage's stacked on the SFT stage's) and exploration and evaluation go through it."""
    from coevo.config import build
    from coevo.methods.runner import execute
    from coevo.run.recipe import RunConfig
    from coevo.store import Store

    lora = {"r": 4, "alpha": 8}
    recipe = {
        "method": "eto",
        "iterations": 1,
        "env": {"name": "tests.toy_env:ToyEnv", "options": {"n_tasks": 4}},
        "model": {"path": str(toy_agent_dir), "max_length": 512, "dtype": "float64"},
        "sft": {"epochs": 2, "batch_size": 4, "optim": {"lr": 3e-3}, "lora": lora,
                "progress": False},
        "dpo": {"epochs": 1, "batch_size": 4, "optim": {"lr": 1e-3}, "lora": lora,
                "progress": False},
        "explore": {"samples": 2, "sampling": {"max_new_tokens": 24}, "batch_size": 8},
        "eval": {"sampling": {"max_new_tokens": 24}, "batch_size": 8},
    }  # fmt: skip
    server.fail = 0
    server.adapters.clear()
    server.roots.clear()
    url = f"http://127.0.0.1:{server.server_port}/v1"
    served = {**recipe, "model": {**recipe["model"], "backend": "server"}}
    served["server"] = {"url": url, "model": "toy", "max_context": 1024}
    local_dir = execute(build(RunConfig, recipe), tmp_path / "local", quiet=True)
    server_dir = execute(build(RunConfig, served), tmp_path / "server", quiet=True)

    def played(run_dir):
        with Store(run_dir, create=False) as store:
            stages = [f"eval-{i}-{s}" for i in (0, 1) for s in ("test_seen", "test_unseen")]
            return {
                stage: [
                    (t.task.id, t.sample, t.turns, t.reward)
                    for t in store.trajectories(stage=stage)
                ]
                for stage in ("explore-1-target", *stages)
            }

    assert played(server_dir) == played(local_dir)
    assert all(played(server_dir).values())
    # Both trained stages' adapters went to the server, and the DPO one is stacked on SFT's.
    assert sorted(name.rsplit("-", 1)[0] for name in server.roots) == [
        "dpo-1-target",
        "sft-target",
    ]
    dpo = server_dir / "stages" / "dpo-1-target" / "served-adapter"
    assert json.loads((dpo / "adapter_config.json").read_text())["r"] == 8
    assert str(dpo) in server.roots.values()
    assert set(server.roots) <= {body["model"] for body in server.bodies}  # played by name


def test_full_fine_tuning_reaches_the_server_through_the_reload_command(
    server, toy_agent_dir, tmp_path, one_thread
):
    import sys

    from coevo.config import build
    from coevo.methods.runner import execute
    from coevo.run.recipe import RunConfig
    from coevo.store import Store

    server.fail = 0
    url = f"http://127.0.0.1:{server.server_port}/v1"
    post = "import json, sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1], json.dumps({'model': sys.argv[2]}).encode()))"
    recipe = {
        "method": "sft",
        "env": {"name": "tests.toy_env:ToyEnv", "options": {"n_tasks": 4}},
        "model": {"path": str(toy_agent_dir), "max_length": 512, "dtype": "float64"},
        "sft": {"epochs": 2, "batch_size": 4, "optim": {"lr": 3e-3}, "progress": False},
        "eval": {"sampling": {"max_new_tokens": 24}, "batch_size": 8},
    }
    served = {**recipe, "model": {**recipe["model"], "backend": "server"}}
    served["server"] = {"url": url, "model": "toy", "max_context": 1024, "reload_timeout": 60,
                        "reload_command": f"{sys.executable} -c \"{post}\" {url}/test_reload {{model}}"}  # fmt: skip
    base = server.policy
    try:
        local_dir = execute(build(RunConfig, recipe), tmp_path / "local", quiet=True)
        server_dir = execute(build(RunConfig, served), tmp_path / "server", quiet=True)
        assert server.policy.path == server_dir / "stages" / "sft-target" / "model"
    finally:
        server.policy = base

    def played(run_dir):
        with Store(run_dir, create=False) as store:
            return [
                (t.task.id, t.turns, t.reward) for t in store.trajectories(stage="eval-0-test_seen")
            ]

    assert played(server_dir) == played(local_dir) != []
