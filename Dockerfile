# Two images from one build: `--target operator` (the kopf operator, no Spark) and `--target spark` (the
# mirror job on Spark 4.1.1 from the pyspark wheel, Java 17, Python 3.11).
#
# Both start from plain Debian bookworm, whose own Python is 3.11 (the wheel needs >= 3.11) and which carries
# OpenJDK 17. BASE_IMAGE is a build argument: with a registry at hand the default works as it is; where no
# registry answers, `sparkmirror dev images` makes an equivalent base from Debian packages (debootstrap) and
# passes it here. Versions match pyproject.toml's pins.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS python
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PATH=/opt/sparkmirror/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update -q \
    && apt-get install -yq --no-install-recommends python3 python3-venv ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/sparkmirror/venv

FROM python AS wheel
# a compiler for the batch path's C (spark-app/sparkmirror/copying/_merge.c and the other _*.c there); this stage is
# thrown away
RUN apt-get update -q \
    && apt-get install -yq --no-install-recommends gcc libc6-dev python3-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY spark-app ./spark-app
COPY operator ./operator
# the extension is optional to setuptools (a machine without a compiler still installs the package); an image
# without it is refused here rather than shipped 15x slower a merged record
RUN pip wheel -q --no-deps -w /wheels . \
    && python3 -c 'import glob, sys, zipfile; sys.exit(not any("copying/_merge" in n for n in \
        zipfile.ZipFile(glob.glob("/wheels/sparkmirror-*.whl")[0]).namelist()))'

FROM python AS operator
# numeric user, so `runAsNonRoot` can be verified by the kubelet
RUN useradd --uid 10001 --gid 0 --home-dir /home/sparkmirror --create-home sparkmirror
COPY pyproject.toml /tmp/pyproject.toml
# dependencies first (a layer that survives source changes), then the package itself; the `operator` extra has
# kafka-python for spec.failover's share groups, none of the job's (tests/unit/test_operator_image_imports.py)
RUN pip install -q $(python3 -c 'import tomllib; p = tomllib.load(open("/tmp/pyproject.toml", "rb"))["project"]; \
        print(" ".join(p["dependencies"] + p["optional-dependencies"]["operator"]))')
COPY --from=wheel /wheels /wheels
RUN pip install -q --no-deps /wheels/sparkmirror-*.whl && rm -rf /wheels /tmp/pyproject.toml
USER 10001
ENTRYPOINT ["tini", "--", "sparkmirror", "operator"]

FROM python AS spark
RUN apt-get update -q \
    && apt-get install -yq --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 185 --gid 0 --home-dir /home/spark --create-home spark
COPY pyproject.toml /tmp/pyproject.toml
RUN pip install -q $(python3 -c 'import tomllib; p = tomllib.load(open("/tmp/pyproject.toml", "rb"))["project"]; \
        print(" ".join(p["dependencies"] + p["optional-dependencies"]["job"]))')
COPY --from=wheel /wheels /wheels
COPY spark-app/image/entrypoint.sh spark-app/image/job.py /opt/sparkmirror/
RUN pip install -q --no-deps /wheels/sparkmirror-*.whl && rm -rf /wheels /tmp/pyproject.toml \
    && chmod 0755 /opt/sparkmirror/entrypoint.sh \
    && pyspark="$(python3 -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')" \
    && mkdir -p /opt/spark/conf && ln -s "$pyspark/bin" "$pyspark/jars" /opt/spark/
# SPARK_HOME is a real folder (Spark on Kubernetes mounts its properties at $SPARK_HOME/conf)
ENV SPARK_HOME=/opt/spark HOME=/home/spark \
    PYSPARK_PYTHON=/opt/sparkmirror/venv/bin/python3 PYSPARK_DRIVER_PYTHON=/opt/sparkmirror/venv/bin/python3
WORKDIR /home/spark
USER 185
ENTRYPOINT ["/opt/sparkmirror/entrypoint.sh"]
