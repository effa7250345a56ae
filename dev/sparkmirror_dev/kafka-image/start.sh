#!/bin/bash
# Starts one KRaft node. KAFKA_PROPERTIES holds the listener settings (one property a line); the node's own
# controller listener is added here. KAFKA_SCRAM_USERS ("name=password" a line) are created at format time,
# which is how KRaft clusters get their first SCRAM credentials.
set -euo pipefail
data="${KAFKA_DATA_DIR:-/var/lib/kafka/data}"
conf=/var/lib/kafka/server.properties
java_opts=(-Xmx"${KAFKA_HEAP:-384m}" -Xms"${KAFKA_HEAP:-384m}" -XX:+UseG1GC -Djava.awt.headless=true
           -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties)
{
  echo "node.id=1"
  echo "process.roles=broker,controller"
  echo "controller.quorum.voters=1@localhost:9095"
  echo "controller.listener.names=CONTROLLER"
  echo "log.dirs=$data"
  echo "offsets.topic.replication.factor=1"
  echo "transaction.state.log.replication.factor=1"
  echo "transaction.state.log.min.isr=1"
  echo "auto.create.topics.enable=false"
  printf '%s\n' "${KAFKA_PROPERTIES:?KAFKA_PROPERTIES must hold the listeners}"
} > "$conf"
format=(format -t "${KAFKA_CLUSTER_ID:-sparkmirrorkindground1}" -c "$conf" --ignore-formatted)
while IFS='=' read -r user password; do
  [[ -n "$user" ]] && format+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$password]")
done <<< "${KAFKA_SCRAM_USERS:-}"
java -Xmx256m -cp '/opt/kafka/libs/*' kafka.tools.StorageTool "${format[@]}"
exec java "${java_opts[@]}" -cp '/opt/kafka/libs/*' kafka.Kafka "$conf"
