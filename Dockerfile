# syntax=docker/dockerfile:1
# Two images from one build: `--target operator` (kopf operator, no Spark) and `--target spark` (the job on
# the official Apache Spark image). Versions match pyproject.toml's pins.
ARG SPARK_IMAGE=apache/spark:4.1.1-scala2.13-java17-python3-ubuntu

FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY spark-app ./spark-app
COPY operator ./operator
RUN pip wheel --no-deps -w /wheels .

FROM python:3.11-slim AS operator
RUN useradd --uid 10001 --create-home sparkmirror
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir "$(ls /wheels/sparkmirror-*.whl)[operator]" && rm -rf /wheels
USER 10001
ENTRYPOINT ["sparkmirror", "operator"]

FROM ${SPARK_IMAGE} AS spark
USER root
COPY --from=wheel /wheels /wheels
# Spark itself comes with the image: install the job's other dependencies, not the pyspark wheel
RUN pip3 install --no-cache-dir confluent-kafka==2.16.1 pydantic==2.14.3 PyYAML==6.0.3 pyarrow==22.0.0 \
        pandas==2.3.3 prometheus-client==0.26.0 \
    && pip3 install --no-cache-dir --no-deps /wheels/sparkmirror-*.whl && rm -rf /wheels \
    && mkdir -p /opt/sparkmirror \
    && printf 'from sparkmirror.job import main\nmain()\n' > /opt/sparkmirror/job.py
USER spark
