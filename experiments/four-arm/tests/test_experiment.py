"""The experiment end to end on a real cluster, with the simulated agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cairn_client import Cairn, State
from cairn_client.testing import LocalCluster

from conftest import RunExperiment, environment
from four_arm.cli import main
from four_arm.coins import Coins
from four_arm.experiment import Job, Setup, run_job
from four_arm.play import SessionRecord, World
from four_arm.scenario import BELIEF_KEY, FALSE_BELIEF, PLACEHOLDER_KEY, RESULT_KEY
from four_arm.simulated import SimulatedAgent, SimulatedParams
from four_arm.space import WriteOutcome

SMALL = ("--seeds", "6", "--sessions", "12", "--jobs", "3")


@pytest.fixture(scope="module")
def small_run(run_experiment: RunExperiment, tmp_path_factory: pytest.TempPathFactory) -> Any:
    plots = tmp_path_factory.mktemp("plots")
    document, printed = run_experiment(*SMALL, "--trace", "--plots", str(plots))
    return document, printed, plots


def _record(document: dict[str, Any], arm: str, premise: str) -> dict[str, Any]:
    [record] = [r for r in document["records"] if (r["arm"], r["premise"]) == (arm, premise)]
    return dict(record)


def test_results_have_the_required_fields_and_say_which_agent(small_run: Any) -> None:
    document, _, _ = small_run
    assert document["agent"] == {"kind": "simulated", "p_derive": 0.9, "explore": 0.05, "heed": 1.0}
    assert [(r["arm"], r["premise"]) for r in document["records"]] == [
        (arm, premise) for arm in "ABCD" for premise in ("present", "removed")
    ]
    for record in document["records"]:
        assert {
            "arm",
            "premise",
            "rederivations",
            "foreclosed_taken",
            "error_survival_sessions",
        } <= set(record)
        assert len(record["per_run"]["error_survival_sessions"]) == 6
        assert len(record["survival_curve"]) == 13
    assert [(r["mistake"], r["premise"]) for r in document["reinstatement"]] == [
        (mistake, premise)
        for mistake in ("reinstate", "rewrite")
        for premise in ("present", "removed")
    ]


def test_d_ends_the_error_at_once_and_never_writes_the_belief_back(small_run: Any) -> None:
    document, _, _ = small_run
    d = _record(document, "D", "present")
    assert d["per_run"]["rederivations"] == [0] * 6
    assert d["per_run"]["writebacks"] == [0] * 6
    assert d["per_run"]["error_survival_sessions"] == [0] * 6
    for arm in "ABC":
        assert (
            _record(document, arm, "present")["error_survival_sessions"]
            > d["error_survival_sessions"]
        )


def test_a_and_b_re_derive_while_the_premise_is_present(small_run: Any) -> None:
    document, _, _ = small_run
    a = _record(document, "A", "present")
    b = _record(document, "B", "present")
    # A's re-derived belief goes back only past the tombstone, then rides in memory.
    assert a["rederivations"] > 0
    assert a["writeback_outcomes"] == {
        WriteOutcome.WRITTEN: 0,
        WriteOutcome.CLEARED_TOMBSTONE: round(a["writebacks"] * 6),
        WriteOutcome.OVERRODE_REVOCATION: 0,
        WriteOutcome.HELD_BACK: 0,
    }
    assert a["writebacks"] > 0
    # B's lands behind the supersession marker, so it is derived again session after session.
    assert b["rederivations"] > a["rederivations"]
    assert max(b["per_run"]["rederivations"]) >= 3


def test_without_the_premise_nothing_is_re_derived(small_run: Any) -> None:
    document, _, _ = small_run
    for arm in "ABCD":
        removed = _record(document, arm, "removed")
        assert removed["per_run"]["rederivations"] == [0] * 6
        assert removed["per_run"]["error_survival_sessions"] == [0] * 6


def test_reinstatement_recovers_in_one_session(small_run: Any) -> None:
    document, _, _ = small_run
    by_setting = {(r["mistake"], r["premise"]): r for r in document["reinstatement"]}
    for premise in ("present", "removed"):
        assert by_setting["reinstate", premise]["per_run"] == [1] * 6
    # Forgotten, the value is gone; the stale runbook then keeps the agent off the fast deploy.
    assert by_setting["rewrite", "present"]["sessions_to_act_again"] > 1


def test_trace_and_plots(small_run: Any) -> None:
    document, printed, plots = small_run
    assert (
        "trace: disposal D (revoke; reason delivered by recall), premise present, seed 0" in printed
    )
    assert "| D revoke; reason delivered by recall | present |" in printed
    traced = [(t["part"], t["variant"], t["premise"]) for t in document["traces"]]
    assert ("disposal", "A", "present") in traced
    assert all(t["seed"] == 0 and len(t["sessions"]) == 12 for t in document["traces"])
    for name in ("survival.png", "rederivations.png"):
        assert (Path(plots) / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_same_seeds_give_the_same_numbers(
    small_run: Any, run_experiment: RunExperiment
) -> None:
    document, _, _ = small_run
    again, _ = run_experiment(*SMALL)
    assert again["records"] == document["records"]
    assert again["reinstatement"] == document["reinstatement"]


# --- the arms' footprint on the cluster, with a deterministic agent ------------------------

SESSIONS = 5


def _play(
    cluster: LocalCluster, arm: str, p_history: float
) -> tuple[list[SessionRecord], Cairn, str]:
    """One run with an agent that always derives and never explores, so each arm's outcome
    is exact; returns its records, a client and the run's prefix."""
    client = Cairn(endpoints=cluster.endpoints)
    params = SimulatedParams(p_derive=1.0, explore=0.0, heed=1.0)
    setup = Setup(
        make_agent=lambda seed: SimulatedAgent(params, Coins(seed)),
        world=World(sessions=SESSIONS, payoff=1.0, p_history=p_history, mistake_sessions=1),
        tag=f"test-footprint-h{p_history}",
    )
    job = Job("disposal", arm, "present", seed=7)
    return run_job(job, client, setup), client, job.prefix(setup.tag)


def _history(client: Cairn, key: str) -> list[tuple[str, str]]:
    return [(e.kind.value, e.actor) for e in client.history(key).events]


def test_a_footprint_the_belief_is_re_established_past_the_tombstone(cluster: LocalCluster) -> None:
    records, client, prefix = _play(cluster, "A", p_history=0.0)
    with client:
        assert [r.writeback for r in records] == [WriteOutcome.CLEARED_TOMBSTONE] + [None] * 4
        assert all(r.believes_fast_fails and not r.took_fast for r in records)
        assert _history(client, prefix + BELIEF_KEY) == [
            ("written", "agent"),
            ("forgotten", "curator"),
            ("tombstone_cleared", "agent"),
        ]
        belief = client.read(prefix + BELIEF_KEY)
        assert (belief.state, belief.value, belief.generation) == (State.ACTIVE, FALSE_BELIEF, 2)


def test_b_footprint_every_write_back_lands_behind_the_placeholder(cluster: LocalCluster) -> None:
    records, client, prefix = _play(cluster, "B", p_history=0.0)
    with client:
        assert all(r.rederived and r.writeback is WriteOutcome.WRITTEN for r in records)
        assert [kind for kind, _ in _history(client, prefix + BELIEF_KEY)] == (
            ["written", "superseded"] + ["written"] * SESSIONS
        )
        assert client.read(prefix + BELIEF_KEY).superseded_by == prefix + PLACEHOLDER_KEY


def test_c_footprint_the_revocation_refuses_every_write_back(cluster: LocalCluster) -> None:
    records, client, prefix = _play(cluster, "C", p_history=0.0)
    with client:
        assert all(r.rederived and r.writeback is WriteOutcome.HELD_BACK for r in records)
        assert all("[REVOKED]" not in shown for r in records for shown in r.shown)
        assert _history(client, prefix + BELIEF_KEY) == [
            ("written", "agent"),
            ("revoked", "curator"),
        ]


def test_c_footprint_an_agent_that_reads_history_is_warned(cluster: LocalCluster) -> None:
    records, client, _ = _play(cluster, "C", p_history=1.0)
    with client:
        assert not any(r.believes_fast_fails or r.rederived for r in records)


def test_d_footprint_the_belief_stays_revoked_and_the_result_is_learned(
    cluster: LocalCluster,
) -> None:
    records, client, prefix = _play(cluster, "D", p_history=0.0)
    with client:
        assert not any(r.believes_fast_fails for r in records)
        assert "[REVOKED]" in records[0].shown[0]
        assert _history(client, prefix + BELIEF_KEY) == [
            ("written", "agent"),
            ("revoked", "curator"),
        ]
        assert client.read(prefix + BELIEF_KEY).state == State.REVOKED
        assert client.read(prefix + RESULT_KEY).value["outcome"] == "succeeded"


def test_runs_on_an_auth_cluster_as_the_token_s_principal(run_experiment: RunExperiment) -> None:
    with LocalCluster(3, auth=True) as secure:
        document, _ = run_experiment(
            "--arm",
            "D",
            "--premise",
            "present",
            "--seeds",
            "1",
            "--sessions",
            "3",
            endpoints=secure.endpoints,
            token=secure.admin_token,
        )
        assert document["cluster"] == {"kind": "CAIRN_ENDPOINTS", "endpoints": secure.endpoints}
        assert _record(document, "D", "present")["error_survival_sessions"] == 0
        with Cairn(endpoints=secure.endpoints, token=secure.admin_token) as client:
            written = client.list_page("four-arm/").items
            assert written
            assert {item.meta.actor for item in written} == {secure.admin}


@pytest.mark.parametrize("token", ["", "cairn_" + "A" * 43])
def test_a_refused_token_is_one_line_and_exit_1(
    token: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No token, or one the cluster does not know: one line naming the error, no
    traceback, nothing written."""
    with LocalCluster(1, auth=True) as secure:
        env = {"CAIRN_ENDPOINTS": ",".join(secure.endpoints), "CAIRN_TOKEN": token}
        with environment(env):
            assert main(["--arm", "D", "--seeds", "1", "--sessions", "3"]) == 1
        with Cairn(endpoints=secure.endpoints, token=secure.admin_token) as client:
            assert client.list_page("four-arm/").items == []
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("four-arm: error: Unauthenticated: "), line
