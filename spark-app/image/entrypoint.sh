#!/bin/bash
# Entry point of the sparkmirror Spark image. Spark on Kubernetes starts its pods with the image's entry point
# and `driver <spark-submit args>` or `executor` (the executor's settings come as SPARK_* variables); any other
# command runs as given. Spark itself comes from the pyspark wheel, so the image carries this small launcher
# instead of the one in Apache Spark's binary distribution.
set -euo pipefail

# Java refuses a user without a home; OpenShift-style arbitrary uids have no passwd entry
export HOME="${HOME:-/home/spark}"
classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*${SPARK_EXTRA_CLASSPATH:+:$SPARK_EXTRA_CLASSPATH}"

python_driver() {
  # the Python driver (the child of spark-submit's JVM that runs the application) writes its pid to
  # $SPARKMIRROR_DRIVER_PIDFILE once it handles SIGTERM; guessing it among the JVM's children is not safe: the
  # JVM starts and reaps Python workers all the time, and a zombie or a process being spawned looks like one
  local pid
  pid=$(cat "$SPARKMIRROR_DRIVER_PIDFILE" 2>/dev/null) || return 0
  if [ -n "$pid" ] && grep -qx "PPid:[[:space:]]*$1" "/proc/$pid/status" 2>/dev/null; then
    echo "$pid"
  fi
}

case "${1:-}" in
  driver)
    shift
    # under tini (PID 1 reaps zombies); this script stays in between to route the stop signal
    if [ "$$" = 1 ]; then exec tini -s -- "$0" driver "$@"; fi
    set +e  # from here on every status is looked at: the signal trap must never end this script early
    SPARKMIRROR_DRIVER_PIDFILE="$(mktemp -d)/driver.pid"
    export SPARKMIRROR_DRIVER_PIDFILE
    "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@" &
    submit=$!
    # A pod's SIGTERM goes to the Python driver, which drains: no new epoch, the running one commits, then
    # Spark stops, so no transaction is left open to stall read_committed consumers. Sent to spark-submit's
    # JVM it would run its shutdown hook and stop Spark under the running lanes instead; that is done only
    # while the Python driver does not handle the signal yet (nothing copies before it does).
    stop() {
      local py
      py=$(python_driver "$submit")
      kill -TERM "${py:-$submit}" 2>/dev/null
    }
    trap stop TERM INT
    while kill -0 "$submit" 2>/dev/null; do
      wait "$submit"  # also returns when a signal arrives
    done
    wait "$submit"
    exit $?
    ;;
  executor)
    shift
    # Spark passes the executor's JVM options as SPARK_JAVA_OPT_0, _1, ... in order
    java_opts=()
    while IFS= read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -e | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n)
    exec tini -s -- java "${java_opts[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" --podName "${SPARK_EXECUTOR_POD_NAME:-}"
    ;;
  *)
    exec tini -s -- "$@"
    ;;
esac
