"""The LLM agent's plumbing, against a stub chat server on 127.0.0.1 (never a real model).

The stub answers like a model that follows the runbook unless its memory warns it off or
it has seen the fast deploy work, and insists on a refused write unless the refusal is a
revocation warning.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from conftest import RunExperiment
from four_arm.llm import LlmReplyError, parse_reply
from four_arm.scenario import REVOKE_REASON, SILENT_REASON, STALE_LINE
from four_arm.space import WriteOutcome

Policy = Callable[[list[dict[str, str]]], str]


def runbook_follower(messages: list[dict[str, str]]) -> str:
    last = messages[-1]["content"]
    if "Memory refused" in last:
        return json.dumps({"write_anyway": "[REVOKED]" not in last})
    fails = STALE_LINE in last and "[REVOKED]" not in last and '"succeeded"' not in last
    return json.dumps({"believes_fast_fails": fails, "action": "safe" if fails else "fast"})


class StubChat:
    """An OpenAI-compatible ``POST /v1/chat/completions`` answering with ``policy``."""

    def __init__(self) -> None:
        self.policy: Policy = runbook_follower
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with stub.lock:
                    stub.requests.append({"path": self.path, **body})
                reply = {
                    "choices": [
                        {"message": {"role": "assistant", "content": stub.policy(body["messages"])}}
                    ]
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                """Quiet: the test output is about the experiment."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def prompts(self) -> list[str]:
        return [
            message["content"]
            for request in self.requests
            for message in request["messages"]
            if message["role"] == "user"
        ]


@pytest.fixture
def stub() -> Iterator[StubChat]:
    chat = StubChat()
    thread = threading.Thread(target=chat.server.serve_forever, daemon=True)
    thread.start()
    yield chat
    chat.server.shutdown()
    chat.server.server_close()


def _run_llm(run_experiment: RunExperiment, stub: StubChat, arm: str) -> dict[str, Any]:
    document, _ = run_experiment(
        "--agent",
        "llm",
        "--llm-url",
        stub.url,
        "--model",
        "stub-model",
        "--arm",
        arm,
        "--premise",
        "present",
        "--seeds",
        "1",
        "--sessions",
        "3",
        "--p-history",
        "0",
    )
    [record] = document["records"]
    return dict(record, agent=document["agent"])


def test_d_prompt_carries_the_warning_and_the_model_heeds_it(
    run_experiment: RunExperiment, stub: StubChat
) -> None:
    record = _run_llm(run_experiment, stub, "D")
    assert record["agent"] == {"kind": "llm", "model": "stub-model", "url": stub.url}
    assert {r["path"] for r in stub.requests} == {"/v1/chat/completions"}
    assert {r["model"] for r in stub.requests} == {"stub-model"}
    assert {r["messages"][0]["role"] for r in stub.requests} == {"system"}
    warned = [p for p in stub.prompts() if "[beliefs/deploy-fast-fails] [REVOKED]" in p]
    assert warned
    assert all(REVOKE_REASON in p for p in warned)
    assert record["per_run"]["error_survival_sessions"] == [0]
    assert record["per_run"]["rederivations"] == [0]


def test_a_prompt_shows_nothing_of_the_disposal_and_the_model_re_derives(
    run_experiment: RunExperiment, stub: StubChat
) -> None:
    record = _run_llm(run_experiment, stub, "A")
    assert all(STALE_LINE in p for p in stub.prompts() if p.startswith("Session "))
    assert not any(REVOKE_REASON in p for p in stub.prompts())
    # The refusal of its write-back is shown to it, with the silent tombstone's reason.
    [refusal] = [p for p in stub.prompts() if "Memory refused" in p]
    assert "key_forgotten" in refusal
    assert f"Forgotten by curator: {SILENT_REASON}." in refusal
    assert record["writeback_outcomes"][WriteOutcome.CLEARED_TOMBSTONE] == 1
    assert record["per_run"]["error_survival_sessions"] == [3]


def test_prompts_never_name_the_run(run_experiment: RunExperiment, stub: StubChat) -> None:
    _run_llm(run_experiment, stub, "B")
    assert stub.prompts()
    assert not any("four-arm/" in p or "disposal/" in p for p in stub.prompts())


def test_a_reply_that_is_not_exactly_the_json_asked_for_stops_the_run(
    run_experiment: RunExperiment, stub: StubChat
) -> None:
    stub.policy = lambda _: '```json\n{"believes_fast_fails": false, "action": "fast"}\n```'
    with pytest.raises(LlmReplyError, match="not JSON"):
        _run_llm(run_experiment, stub, "D")


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ('{"believes_fast_fails": true}', "expected an object"),
        ('{"believes_fast_fails": true, "action": "fast", "why": "x"}', "expected an object"),
        ('{"believes_fast_fails": "yes", "action": "fast"}', "invalid believes_fast_fails"),
        ('{"believes_fast_fails": true, "action": "deploy"}', "invalid action"),
        ('[true, "fast"]', "expected an object"),
    ],
)
def test_parse_reply_is_strict(reply: str, problem: str) -> None:
    fields: dict[str, Callable[[Any], bool]] = {
        "believes_fast_fails": lambda v: isinstance(v, bool),
        "action": lambda v: v in ("fast", "safe"),
    }
    with pytest.raises(LlmReplyError, match=problem):
        parse_reply(reply, fields)
    assert parse_reply(' {"action": "safe", "believes_fast_fails": true}\n', fields) == {
        "believes_fast_fails": True,
        "action": "safe",
    }
