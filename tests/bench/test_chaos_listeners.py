"""The fault campaign's listeners (`--security`): one kind for both clusters or SOURCE:TARGET, so one campaign can
meet SCRAM on the source and client certificates on the target; what the mirror is given for each cluster, and how
the report names them."""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from bench.chaosmodel import Campaign, listener_kinds
from bench.chaosreport import render
from bench.chaossecurity import SecuredGround


def test_one_kind_is_both_clusters_and_a_pair_is_source_then_target() -> None:
    assert listener_kinds("none") == {"source": "none", "target": "none"}
    assert listener_kinds("mtls") == {"source": "mtls", "target": "mtls"}
    assert listener_kinds("sasl_ssl:mtls") == {"source": "sasl_ssl", "target": "mtls"}


@pytest.mark.parametrize("bad", ["tls", "sasl_ssl:", "mtls:none", "sasl_ssl:mtls:mtls", ""])
def test_an_unknown_listener_is_refused_naming_the_option(bad: str) -> None:
    with pytest.raises(ValueError, match="--security"):
        listener_kinds(bad)


def test_a_mixed_ground_gives_each_cluster_its_own_listener_and_credentials(tmp_path: Path) -> None:
    ground = SecuredGround("sasl_ssl:mtls", tmp_path)
    assert ground.security("source").listeners == ("SASL_SSL",) and ground.security("source").scram_users
    assert ground.security("target").listeners == ("MTLS",) and not ground.security("target").scram_users
    grants: dict[str, list[str]] = {"source": [], "target": []}
    clusters = {role: types.SimpleNamespace(nodes=[types.SimpleNamespace(allow=grants[role].append)],
                                            bootstrap_of=lambda listener, role=role: f"{role}-{listener}")
                for role in grants}
    ground.start(clusters)  # type: ignore[arg-type]
    assert grants == {"source": ["User:mirror"], "target": ["User:CN=mirror"]}  # SCRAM's name, the certificate's
    source = ground.entry("src", clusters["source"], "source")  # type: ignore[arg-type]
    target = ground.entry("tgt", clusters["target"], "target")  # type: ignore[arg-type]
    assert source["bootstrapServers"] == "source-SASL_SSL" and source["authentication"]["type"] == "scram-sha-512"
    assert target["bootstrapServers"] == "target-MTLS" and target["authentication"]["type"] == "tls"
    for path in (source["authentication"]["password"]["file"], target["authentication"]["certificateFile"],
                 target["authentication"]["keyFile"], source["tls"]["caFiles"][0]):
        assert Path(path).read_bytes(), path  # the mounted Secret holds what both listeners need


def test_the_report_names_each_clusters_listener() -> None:
    def head(security: str) -> str:
        return render(Campaign(1, 0, 75.0, 8.0, 100.0, security=security), [], {})

    assert "The mirror's listener on both: PLAINTEXT." in head("none")
    assert "on both: SSL with client certificates (mTLS), authorizer on." in head("mtls")
    assert ("the source's SASL_SSL with SCRAM-SHA-512, the target's SSL with client certificates (mTLS), "
            "authorizer on.") in head("sasl_ssl:mtls")
