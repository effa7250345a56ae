"""build_status: plan + observed applications + lag + problems -> the status (pure)."""
from __future__ import annotations

from sparkmirror.resource.plan import plan
from sparkmirror_operator.lag import GroupLag
from sparkmirror_operator.status import Problem, build_status

RES = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
       "metadata": {"name": "m", "namespace": "ns", "generation": 3},
       "spec": {"version": "2.0", "target": {"alias": "b", "bootstrapServers": "h:1"},
                "mirrors": [{"source": {"alias": "a", "bootstrapServers": "h:2"}},
                            {"source": {"alias": "c", "bootstrapServers": "h:3"}}]}}


def app(state: str | None, error: str | None = None) -> dict:
    if state is None:
        return {"metadata": {}}
    return {"status": {"applicationState": {"state": state, **({"errorMessage": error} if error else {})}}}


def conds(st: dict) -> dict:
    return {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}


def test_ready_when_all_running_with_lag() -> None:
    st = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                      lags={"a": GroupLag(lag=0, partitions=3, last_commit_ms=1_700_000_000_000),
                            "c": GroupLag(lag=5, partitions=1)}, problems=[], old=None, now="T1")
    assert conds(st) == {"Ready": ("True", "Running"), "Progressing": ("False", "Stable"),
                         "Degraded": ("False", "AsExpected"), "Reconciling": ("False", "Reconciled"),
                         "Stalled": ("False", "AsExpected")}
    assert st["observedGeneration"] == 3 and st["lag"] == 5 and st["flowGroupsReady"] == "2/2"
    assert st["version"] == "2.0"
    a = st["flowGroups"][0]
    assert a == {"name": "a", "mirrors": ["a"], "workerGeneration": 1, "version": "2.0", "application": "m-a",
                 "sparkState": "RUNNING", "lag": 0, "partitions": 3, "lastCommitTime": "2023-11-14T22:13:20Z"}


def test_transition_times_kept_and_lag_carried_over() -> None:
    first = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("SUBMITTED")},
                         lags={"a": GroupLag(lag=7, partitions=1), "c": GroupLag(lag=1, partitions=1)},
                         problems=[], old=None, now="T1")
    assert conds(first)["Ready"] == ("False", "Starting") and conds(first)["Progressing"] == ("True", "Starting")
    second = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("SUBMITTED")},
                          lags=None, problems=[], old=first, now="T2")
    assert [c["lastTransitionTime"] for c in second["conditions"]] == ["T1"] * 5
    assert second["lag"] == 8  # lags=None: the previous figures stay
    third = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                         lags=None, problems=[], old=second, now="T3")
    ready = next(c for c in third["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["lastTransitionTime"] == "T3"


def test_failures_and_problems_degrade() -> None:
    st = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("FAILED", "boom"), "c": app(None)},
                      lags=None, problems=[Problem("SecretMissing", "Secret ns/x referenced by spec.target... not "
                                                                    "found")], old=None, now="T")
    assert conds(st)["Degraded"] == ("True", "Multiple") and conds(st)["Ready"] == ("False", "Degraded")
    deg = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert "SparkApplication m-a is FAILED: boom" in deg["message"] and "Secret ns/x" in deg["message"]
    assert st["flowGroups"][1]["sparkState"] == "PENDING"


def test_invalid_spec() -> None:
    bad = {**RES, "spec": {**RES["spec"], "mirrors": [{"source": {"alias": "b", "bootstrapServers": "h"}}]}}
    st = build_status(name="m", generation=4, plan=plan(bad), apps={}, lags=None, problems=[], old=None, now="T")
    assert conds(st) == {"Ready": ("False", "InvalidSpec"), "Progressing": ("False", "InvalidSpec"),
                         "Degraded": ("True", "InvalidSpec"), "Reconciling": ("False", "Stalled"),
                         "Stalled": ("True", "InvalidSpec")}
    assert "spec.mirrors[0].source.alias: must differ from spec.target.alias" in st["conditions"][0]["message"]


def test_paused_and_stopped() -> None:
    paused = {**RES, "spec": {**RES["spec"], "state": "paused"}}
    st = build_status(name="m", generation=1, plan=plan(paused), apps={"a": app("SUSPENDED"), "c": app("SUSPENDED")},
                      lags=None, problems=[], old=None, now="T")
    assert conds(st)["Ready"] == ("False", "Paused") and conds(st)["Progressing"][0] == "False"
    stopped = {**RES, "spec": {**RES["spec"], "state": "stopped"}}
    st = build_status(name="m", generation=1, plan=plan(stopped), apps={}, lags=None, problems=[], old=None, now="T")
    assert conds(st)["Ready"] == ("False", "Stopped") and "application" not in st["flowGroups"][0]


def test_transitions_announce_ready_and_degraded_flips() -> None:
    from sparkmirror_operator.status import transitions

    starting = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("SUBMITTED")},
                            lags=None, problems=[], old=None, now="T1")
    assert transitions(None, starting) == []
    ready = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                         lags=None, problems=[], old=starting, now="T2")
    assert transitions(starting, ready) == [("Normal", "Ready", "2/2 flow groups running")]
    assert transitions(ready, ready) == []
    failed = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("FAILED", "x")},
                          lags=None, problems=[], old=ready, now="T3")
    kinds = [(t, r) for t, r, _ in transitions(ready, failed)]
    assert kinds == [("Warning", "NotReady"), ("Warning", "ApplicationFailed")]
    assert [(t, r) for t, r, _ in transitions(failed, ready)] == [("Normal", "Ready"), ("Normal", "Recovered")]


def test_a_refused_cluster_is_named_in_ready_and_degraded() -> None:
    """A target that refuses the mirror's credentials: Ready False says why, not 'waiting for' a running app."""
    msg = ("spec.target.bootstrapServers: target cluster 'b' (h:1): cannot read progress topic 'p': KafkaError{"
           "code=_AUTHENTICATION,val=-169,str=\"SASL authentication error: Authentication failed\"}")
    st = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                      lags=None, problems=[Problem("AuthenticationFailed", msg)], old=None, now="T1")
    assert conds(st)["Ready"] == ("False", "Degraded") and conds(st)["Degraded"] == ("True", "AuthenticationFailed")
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert "Authentication failed" in ready["message"] and "waiting for" not in ready["message"]


def test_reconciling_and_stalled_for_gitops_tools() -> None:
    """kstatus reads Reconciling/Stalled: starting is Reconciling, what needs a change is Stalled, a transient
    problem neither (Ready False keeps it in progress), and never both True."""
    def gitops(st: dict) -> tuple:
        c = conds(st)
        return c["Reconciling"], c["Stalled"]

    starting = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app(None)},
                            lags=None, problems=[], old=None, now="T1")
    assert gitops(starting) == (("True", "Starting"), ("False", "AsExpected"))
    reconciling = next(c for c in starting["conditions"] if c["type"] == "Reconciling")
    assert reconciling["message"] == "starting c" and reconciling["observedGeneration"] == 3

    missing = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app(None)},
                           lags=None, problems=[Problem("SecretMissing", "Secret ns/x referenced by "
                                                                         "spec.target.authentication: not found")],
                           old=starting, now="T2")
    assert gitops(missing) == (("False", "Stalled"), ("True", "SecretMissing"))
    assert "Secret ns/x" in next(c for c in missing["conditions"] if c["type"] == "Stalled")["message"]

    failed = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("FAILED", "x"), "c": app("RUNNING")},
                          lags=None, problems=[Problem("AuthenticationFailed", "refused")], old=None, now="T")
    assert gitops(failed)[1] == ("True", "Multiple")

    unreachable = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                               lags=None, problems=[Problem("ClusterUnreachable", "spec.target: h:1 unreachable")],
                               old=None, now="T")
    assert gitops(unreachable) == (("False", "Reconciled"), ("False", "AsExpected"))
    assert conds(unreachable)["Ready"] == ("False", "Degraded") and conds(unreachable)["Degraded"][0] == "True"

    pausing = {**RES, "spec": {**RES["spec"], "state": "paused"}}
    st = build_status(name="m", generation=1, plan=plan(pausing), apps={"a": app("SUSPENDED"), "c": app("RUNNING")},
                      lags=None, problems=[], old=None, now="T")
    assert gitops(st)[0] == ("True", "Pausing")
    for st in (starting, missing, failed, unreachable):
        assert sum(c["status"] == "True" for c in st["conditions"] if c["type"] in ("Reconciling", "Stalled")) <= 1


def test_consumer_group_lag_lists_the_most_lagging_groups_and_is_carried_over() -> None:
    from sparkmirror.consumerlag import STATUS_GROUPS, ConsumerLag

    groups = [ConsumerLag(f"g{i:02d}", 100 - i, 2) for i in range(STATUS_GROUPS + 5)]
    first = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                         lags={"a": GroupLag(lag=0, partitions=2, consumer_groups=groups),
                               "c": GroupLag(lag=0, partitions=1)}, problems=[], old=None, now="T1")
    a, c = first["flowGroups"]
    assert a["consumerGroupLag"] == sum(g.lag for g in groups)  # every group counts in the sum
    assert len(a["consumerGroups"]) == STATUS_GROUPS and a["consumerGroups"][0] == {"group": "g00", "lag": 100,
                                                                                    "partitions": 2}
    assert "consumerGroups" not in c  # no mirror of `c` checkpoints: nothing to say, not zero
    second = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                          lags=None, problems=[], old=first, now="T2")
    assert second["flowGroups"][0]["consumerGroups"] == a["consumerGroups"]
    from sparkmirror.resource.statusmodel import KafkaMirrorMaker2Status
    KafkaMirrorMaker2Status.model_validate(first)  # the CRD's schema takes it


def test_a_refusing_cluster_is_the_reason_not_the_silent_lease_it_causes() -> None:
    """A target refusing the mirror's credentials keeps the driver from ever renewing its Lease: Degraded says the
    refusal alone (on kind it said Multiple, with LeaseNotRenewed beside it); a silent Lease with no refusal stays."""
    from sparkmirror_operator.rolloutplan import Plan as Rollout

    silent = Rollout(silent={"a": "flow group a: generation 1 holds the Lease but it has not renewed its Lease "
                                  "since the Lease moved to it 30 s"})
    refused = Problem("AuthenticationFailed", "spec.target.bootstrapServers: target cluster 'b' (h:1): SASL "
                                              "authentication error: Authentication failed")
    st = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                      lags=None, problems=[refused], old=None, now="T", rollout=silent)
    assert conds(st)["Degraded"] == ("True", "AuthenticationFailed")
    assert "renewed" not in next(c for c in st["conditions"] if c["type"] == "Degraded")["message"]
    st = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                      lags=None, problems=[], old=None, now="T", rollout=silent)
    assert conds(st)["Degraded"] == ("True", "LeaseNotRenewed")


def test_a_job_that_said_why_stays_named_between_retries() -> None:
    """Exit 4 (too few brokers) is restarted with backoff: between the Spark operator's retries the application
    is SUBMITTED or RUNNING again, yet the status keeps the job's words from its Lease (as seen on kind, where it
    otherwise flipped to Progressing and LeaseNotRenewed), until the generation renews its Lease."""
    from sparkmirror.resource.names import EXIT_TOO_FEW_BROKERS
    from sparkmirror_operator.rolloutplan import Plan as Rollout

    words = ("topic 'a.t' needs replication factor 3 (replication.factor) but cluster 'b' has 1 broker(s): set "
             "replication.factor in mirrors[a->b]'s connector config to at most 1")
    rollout = Rollout(failures={"a": {"generation": 1, "exitCode": EXIT_TOO_FEW_BROKERS, "message": words,
                                      "atMs": 1}})
    for state in ("SUBMITTED", "RUNNING", "FAILED"):
        st = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app(state), "c": app("RUNNING")},
                          lags=None, problems=[], old=None, now="T", rollout=rollout)
        assert conds(st)["Degraded"] == ("True", "ReplicationFactorRefused"), (state, conds(st))
        assert conds(st)["Stalled"] == ("True", "ReplicationFactorRefused") and st["flowGroupsReady"] == "1/2"
        deg = next(c for c in st["conditions"] if c["type"] == "Degraded")
        assert words in deg["message"] and "restarted with backoff" in deg["message"], deg["message"]
    st = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                      lags=None, problems=[], old=None, now="T", rollout=Rollout())
    assert conds(st)["Degraded"] == ("False", "AsExpected")  # no current record: a running application is running


def test_one_rule_a_problem_that_explains_a_silent_lease_replaces_it() -> None:
    """holders.silence_explained: a cluster refusing the mirror explains every group's silent Lease, a problem of
    the group itself explains its own; nothing else does (a silent Lease beside them stays a problem)."""
    from sparkmirror_operator.holders import silence_explained

    assert silence_explained("a", [("AuthenticationFailed", None)])  # the lag reader's refusal: the resource's
    assert silence_explained("a", [("AuthorizationFailed", "c")])  # exit 3 of another group: the cluster refuses
    assert silence_explained("a", [("ReplicationFactorRefused", "a")])  # its own job's words on its Lease
    assert silence_explained("a", [("ApplicationFailed", "a")])
    assert not silence_explained("a", [("ReplicationFactorRefused", "c")])  # another group's topic: not a's
    assert not silence_explained("a", [("ClusterUnreachable", None), ("NoTopics", None)])  # a driver waits these out
    assert not silence_explained("a", [("LeaseNotRenewed", "a"), ("LeaseNotRenewed", "c")]) and \
        not silence_explained("a", [])
    assert silence_explained("a", [], said={"a"}) and not silence_explained("a", [], said={"c"})  # its Lease record


def test_the_rule_on_the_status_a_groups_own_words_replace_its_silence_not_anothers() -> None:
    """Exit 4 of group a, restarted and RUNNING again without renewing: Degraded says a's words alone; a silent c
    beside it is still said (Multiple)."""
    from sparkmirror.resource.names import EXIT_TOO_FEW_BROKERS
    from sparkmirror_operator.rolloutplan import Plan as Rollout

    failures = {"a": {"generation": 1, "exitCode": EXIT_TOO_FEW_BROKERS, "message": "topic 'a.t' needs 3", "atMs": 1}}
    quiet = {g: f"flow group {g}: generation 1 holds the Lease but it has not renewed its Lease for 16 s"
             for g in ("a", "c")}
    st = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                      lags=None, problems=[], old=None, now="T",
                      rollout=Rollout(failures=failures, silent={"a": quiet["a"]}))
    assert conds(st)["Degraded"] == ("True", "ReplicationFactorRefused")
    st = build_status(name="m", generation=3, plan=plan(RES), apps={"a": app("RUNNING"), "c": app("RUNNING")},
                      lags=None, problems=[], old=None, now="T", rollout=Rollout(failures=failures, silent=quiet))
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "Multiple" and "flow group c: generation 1 holds the Lease" in degraded["message"]
    assert "flow group a: generation 1 holds the Lease" not in degraded["message"]
