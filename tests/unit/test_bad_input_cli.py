"""Every command a user runs answers bad input with one line naming the file (and field), exit 2, no traceback.

Each command runs as a subprocess, as a user would run it: `sparkmirror import`, `sparkmirror run --check -f`,
`sparkmirror run -f` (stops before Spark: the input is refused first), `python -m sparkmirror.job --config`
and the Spark image's `job.py --config`. No Kafka, Spark session or Kubernetes is needed.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SECRET = b"hunter\xff\xfe2-s3cr3t"  # not UTF-8: the text around the bad bytes must not leak either

RESOURCE = """apiVersion: sparkmirror.io/v1alpha1
kind: KafkaMirrorMaker2
metadata: {name: m}
spec:
  target: {alias: b, bootstrapServers: "127.0.0.1:1"%s}
  mirrors: [{source: {alias: a, bootstrapServers: "127.0.0.1:2"}}]
"""

# name -> (file content or None for "no such file" / "dir" for a directory, what the message must say)
BAD_FILES: dict[str, tuple[bytes | str | None, str]] = {
    "missing": (None, "no such file"),
    "directory": ("dir", "is a directory"),
    "broken-yaml": (b"apiVersion: v1\nspec: [unclosed\n", "not valid YAML"),
    "list": (b"- a\n- b\n", "got a list"),
    "scalar": (b"just words\n", ""),  # import reads it as an mm2.properties file: it says what it looked for
    "empty": (b"", "empty"),
    "not-utf8": (b"apiVersion: sparkmirror.io/v1alpha1\nkind: KafkaMirrorMaker2\nmetadata: {name: \"x\xff\"}\n",
                 "not UTF-8 text (line 3, column 20)"),
    "unknown-field": ((RESOURCE % ", bogus: 1").encode(), "spec.target.bogus"),
}
COMMANDS: dict[str, list[str]] = {
    "import": ["-m", "sparkmirror.cli", "import"],
    "run-check": ["-m", "sparkmirror.cli", "run", "--check", "-f"],
    "run": ["-m", "sparkmirror.cli", "run", "-f"],
    "verify": ["-m", "sparkmirror.cli", "verify", "-f"],
    "job": ["-m", "sparkmirror.job", "--config"],
}


def run(args: list[str], env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPARKMIRROR_SECRET_")}
    out = subprocess.run([sys.executable, *args], capture_output=True, timeout=120, cwd=cwd,
                         env={**base, **(env or {})})
    return subprocess.CompletedProcess(out.args, out.returncode, out.stdout.decode("utf-8", "replace"),
                                       out.stderr.decode("utf-8", "replace"))


def bad_file(tmp_path: Path, case: str) -> Path:
    content, _ = BAD_FILES[case]
    path = tmp_path / f"{case}.yaml"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_is_one_line_naming_it(tmp_path: Path, command: str, case: str) -> None:
    if command == "job" and case == "unknown-field":
        path = tmp_path / "flowgroup.yaml"  # the job reads a flow-group config, not a resource
        path.write_text("name: g\nclusters: []\nmirrors: [{name: a, source: a, target: b}]\nbogus: 1\n")
        expected = "bogus: Extra inputs are not permitted"
    else:
        path = bad_file(tmp_path, case)
        expected = BAD_FILES[case][1]
    out = run([*COMMANDS[command], str(path)])
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout, out.stderr
    problems = [ln for ln in out.stderr.splitlines() if not ln.startswith("note: ")]
    assert problems and all(str(path) in ln for ln in problems), out.stderr
    assert expected in out.stderr, out.stderr
    if command == "import" and case == "scalar":
        assert "neither a KafkaMirrorMaker2 manifest" in out.stderr and "nothing to convert" in out.stderr


def test_the_image_job_entry_answers_the_same(tmp_path: Path) -> None:
    """The Spark image's application file (what spark-submit runs) goes through the same path."""
    path = bad_file(tmp_path, "list")
    out = run([str(REPO / "spark-app" / "image" / "job.py"), "--config", str(path)])
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"{path}: expected a flow-group config (a mapping), got a list" in out.stderr


def test_bad_key_value_options(tmp_path: Path) -> None:
    good = tmp_path / "fg.yaml"
    good.write_text("name: g\nclusters: [{alias: a, bootstrapServers: 'h:1'}, {alias: b, bootstrapServers: 'h:2'}]\n"
                    "mirrors: [{name: a, source: a, target: b}]\n")
    resource = tmp_path / "resource.yaml"
    resource.write_text(RESOURCE % "")
    for args in (["-m", "sparkmirror.job", "--config", str(good)],
                 ["-m", "sparkmirror.cli", "run", "-f", str(resource)]):
        out = run([*args, "--conf", "spark.x"])
        assert out.returncode == 2 and "--conf: expected K=V, got 'spark.x'" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr


def test_malformed_strimzi_manifest_names_the_part(tmp_path: Path) -> None:
    path = tmp_path / "strimzi.yaml"
    path.write_text("apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaMirrorMaker2\nmetadata: {name: m}\n"
                    "spec:\n  clusters: [{alias: a}, 7]\n")
    out = run(["-m", "sparkmirror.cli", "import", str(path)])
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"{path}: spec.clusters[1]: expected a mapping, got a number" in out.stderr


def test_import_from_stdin_names_stdin(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "sparkmirror.cli", "import", "-"], input=b"kind: [\n",
                         capture_output=True, timeout=60)
    assert out.returncode == 2 and b"Traceback" not in out.stderr, out.stderr
    assert out.stderr.decode().startswith("sparkmirror import: stdin: not valid YAML"), out.stderr


def test_a_password_that_is_not_text_is_named_never_shown(tmp_path: Path) -> None:
    """`run -f` reads every referenced secret before Spark starts: a non-UTF-8 password is refused by the name
    of its variable, and neither its bytes nor the readable text around them appear."""
    path = tmp_path / "scram.yaml"
    auth = (", tls: {trustedCertificates: []}, authentication: {type: scram-sha-512, username: u, "
            "passwordSecret: {secretName: pw, password: password}}")
    path.write_text(RESOURCE % auth)
    out = subprocess.run([sys.executable, "-m", "sparkmirror.cli", "run", "-f", str(path)], capture_output=True,
                         timeout=120, env={**os.environ, "SPARKMIRROR_SECRET_PW_PASSWORD": SECRET})
    assert out.returncode == 2 and b"Traceback" not in out.stderr, out.stderr
    assert (b"spec.target: cluster 'b': environment variable SPARKMIRROR_SECRET_PW_PASSWORD is not UTF-8 text"
            in out.stderr), out.stderr
    for leak in (SECRET, b"hunter", b"s3cr3t", b"\\xff", b"0xff"):
        assert leak not in out.stderr + out.stdout


def test_a_password_over_plaintext_is_refused_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "plain.yaml"
    auth = ", authentication: {type: plain, username: u, passwordSecret: {secretName: pw, password: password}}"
    path.write_text(RESOURCE % auth)
    out = run(["-m", "sparkmirror.cli", "run", "--check", "-f", str(path)])
    assert out.returncode == 2, out.stderr
    assert (f"{path}: spec.target.authentication: a password must not travel over a plaintext listener"
            in out.stderr), out.stderr
    path.write_text(RESOURCE % auth.replace("type: plain,", "type: plain, allowPlaintextCredentials: true,"))
    out = run(["-m", "sparkmirror.cli", "run", "--check", "-f", str(path)])
    assert out.returncode == 0 and "flow group a: a -> b" in out.stdout, out.stderr
