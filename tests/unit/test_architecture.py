"""The import rules of ARCHITECTURE.md, checked on the source: every import, lazy ones inside functions too.

A rule names who imports (a module prefix) and what it must not import (module prefixes, third-party or
ours). The first matching rule of the importer applies, so specific rules come before general ones.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"spark-app": REPO / "spark-app", "operator": REPO / "operator", "dev": REPO / "dev", "bench": REPO}
PACKAGES = ("sparkmirror", "sparkmirror_operator", "sparkmirror_dev", "bench")  # ours, under one of the roots

THIRD_PARTY_K8S = ("kubernetes", "kopf")
THIRD_PARTY_KAFKA = ("confluent_kafka",)
THIRD_PARTY_SPARK = ("pyspark",)
DEV_ONLY = ("sparkmirror_dev", "tests", "bench", "psutil", "pytest")
# what only the job's image installs (pyproject's `job` extra beyond the operator's): the batch path's codecs,
# CRC32C and record classes, Spark's Arrow and pandas
JOB_ONLY = ("aiokafka", "crc32c", "snappy", "lz4", "zstandard", "pyarrow", "pandas")
SPARK_SIDE = ("sparkmirror.driver", "sparkmirror.datasource", "sparkmirror.job", "sparkmirror.copying", "sparkmirror.runner", "sparkmirror.metrics",
              "sparkmirror.mirrormonitor", "sparkmirror.stats",
              "sparkmirror.verify")

# importer prefix -> forbidden prefixes
RULES: list[tuple[str, tuple[str, ...]]] = [
    # the resource: schema, planning, names. Pure: pydantic and YAML only, nothing else of ours
    ("sparkmirror.resource", ("sparkmirror.", "sparkmirror_operator", *THIRD_PARTY_K8S, *THIRD_PARTY_KAFKA,
                              *THIRD_PARTY_SPARK, *DEV_ONLY)),
    # pure helpers the operator shares with the job: no Spark, no Kubernetes
    ("sparkmirror.replication", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                                 *DEV_ONLY)),
    ("sparkmirror.progress", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                              *DEV_ONLY)),
    ("sparkmirror.inputs", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_KAFKA,
                            *THIRD_PARTY_SPARK, *DEV_ONLY)),
    ("sparkmirror.topicsync", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                               *DEV_ONLY)),
    ("sparkmirror.aclsync", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                             *DEV_ONLY)),
    ("sparkmirror.aclplan", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                             *DEV_ONLY)),
    ("sparkmirror.topicdeletion", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                                   *DEV_ONLY)),
    ("sparkmirror.replicas", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                              *DEV_ONLY)),
    ("sparkmirror.refusal", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                             *DEV_ONLY)),
    ("sparkmirror.clientcheck", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                                 *DEV_ONLY)),
    ("sparkmirror.kafkaerror", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                                *DEV_ONLY)),
    ("sparkmirror.faultkind", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_KAFKA,
                               *THIRD_PARTY_SPARK, *DEV_ONLY)),
    ("sparkmirror.autoscale", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_KAFKA,
                               *THIRD_PARTY_SPARK, *DEV_ONLY)),
    ("sparkmirror.credentials", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_KAFKA,
                                 *THIRD_PARTY_SPARK, *DEV_ONLY)),
    # the wire (kafka-python): shared by the batch path and the share-group admin, so it knows neither
    ("sparkmirror.wire", ("sparkmirror_operator", "sparkmirror.sharegroups", *SPARK_SIDE, *THIRD_PARTY_K8S,
                          *THIRD_PARTY_KAFKA, *THIRD_PARTY_SPARK, *JOB_ONLY, *DEV_ONLY)),
    # share groups and the failover that carries them run in the operator too (spec.failover)
    ("sparkmirror.sharegroups", ("sparkmirror_operator", *SPARK_SIDE, *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK,
                                 *JOB_ONLY, *DEV_ONLY)),
    # the CLI front door only dispatches to entry points
    ("sparkmirror.cli", ("sparkmirror_operator", "sparkmirror_dev", *THIRD_PARTY_K8S, *THIRD_PARTY_SPARK)),
    # the one place of the job that reads the operator's Lease (the Kubernetes client, never kopf)
    ("sparkmirror.handoff.lease", ("sparkmirror_operator", "kopf", *DEV_ONLY)),
    # the job and the local runner: never the operator, never Kubernetes
    ("sparkmirror", ("sparkmirror_operator", *THIRD_PARTY_K8S, *DEV_ONLY)),
    # the operator: its image has no pyspark, so nothing of the Spark side
    ("sparkmirror_operator", (*SPARK_SIDE, *THIRD_PARTY_SPARK, *DEV_ONLY)),
    # dev tools may use everything
    ("sparkmirror_dev", ()),
    # the benchmarks too; they are checked for import circles with the rest
    ("bench", ()),
]


def _modules() -> dict[str, Path]:
    out = {}
    for root in ROOTS.values():
        for path in (p for package in PACKAGES for p in (root / package).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            if "-" not in rel.name:
                parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
                out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, relative ones resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            # `from pkg import mod` imports pkg.mod when it is a module
            out += [(node.lineno, f"{name}.{a.name}") for a in node.names] or [(node.lineno, name)]
    return out


def _matches(name: str, prefix: str) -> bool:
    if prefix.endswith("."):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + ".")


def violations() -> list[str]:
    out = []
    for module, path in sorted(_modules().items()):
        rule = next((r for r in RULES if _matches(module, r[0])), None)
        assert rule is not None, f"{module}: no import rule covers it (add one to ARCHITECTURE.md and RULES)"
        for line, name in _imports(module, path):
            for bad in rule[1]:
                if _matches(name, bad) and not _matches(name, rule[0]):  # its own part is always fine
                    out.append(f"{path.relative_to(REPO)}:{line}: {module} imports {name} "
                               f"(rule for {rule[0]}: not {bad})")
    return out


def test_imports_follow_the_architecture():
    assert violations() == []


def test_the_rules_catch_a_crossing(tmp_path, monkeypatch):
    """The checker itself: a job module importing the operator is reported."""
    fake = tmp_path / "spark-app" / "sparkmirror"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "leaky.py").write_text("def f():\n    from sparkmirror_operator.render import render\n")
    (fake / "resource").mkdir()
    (fake / "resource" / "__init__.py").write_text("")
    (fake / "resource" / "model.py").write_text("from ..progress import read_progress\n")
    monkeypatch.setitem(globals(), "ROOTS", {"spark-app": tmp_path / "spark-app"})
    monkeypatch.setitem(globals(), "REPO", tmp_path)
    found = violations()
    assert any("sparkmirror.leaky imports sparkmirror_operator.render" in v for v in found), found
    assert any("sparkmirror.resource.model imports sparkmirror.progress" in v for v in found), found
    assert len(found) == 2, found


def test_the_images_carry_the_product_alone():
    """The wheel the Dockerfile installs holds sparkmirror and sparkmirror_operator, never the dev tools."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    find = project["tool"]["setuptools"]["packages"]["find"]
    assert set(find["where"]) == {"spark-app", "operator"}
    assert not list((REPO / "spark-app").rglob("sparkmirror_dev")) and not (REPO / "spark-app/sparkmirror/devenv").exists()
    dockerignore = (REPO / ".dockerignore").read_text().split()
    assert "dev" in dockerignore and "tests" in dockerignore and "bench" in dockerignore


def import_cycles() -> list[list[str]]:
    """Circles among our modules (every import, lazy and type-only ones too): each is a set of modules that
    import each other, round or through others. A circle means no part of it can be read, tested or replaced
    alone."""
    modules = _modules()

    def ours(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {ours(name) for _, name in _imports(module, path)}
        # a package's own modules may use what it re-exports, and a package may import its modules
        graph[module] = {t for t in targets if t and t != module and not _matches(module, t)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_circles():
    assert import_cycles() == []


def test_the_circle_check_finds_a_type_only_circle(tmp_path, monkeypatch):
    fake = tmp_path / "spark-app" / "sparkmirror"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "a.py").write_text("from .b import f\n")
    (fake / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import g\n")
    monkeypatch.setitem(globals(), "ROOTS", {"spark-app": tmp_path / "spark-app"})
    assert import_cycles() == [["sparkmirror.a", "sparkmirror.b"]]
