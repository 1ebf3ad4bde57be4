"""ServerPolicy against a local OpenAI-compatible completions server written in the test.

The server answers with an HFPolicy over the same checkpoint, so a rollout through HTTP must
give exactly the episodes the in-process policy gives.
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

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
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
        with self.server.lock:
            (c,) = self.server.policy.generate([body["prompt"]], sampling, seeds=seeds)
        choice = {"index": 0, "text": c.text, "finish_reason": c.finish_reason}
        if c.logprobs is not None:
            tokens = [f"token_id:{t}" for t in c.token_ids]
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": list(c.logprobs)}
        payload = json.dumps({"object": "text_completion", "choices": [choice]}).encode()
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
