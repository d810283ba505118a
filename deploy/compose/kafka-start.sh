#!/bin/bash
# The single Kafka node of the compose stack: KRaft (broker and controller in one process),
# clients log in with SASL/SCRAM-SHA-256 as tikk's queue URLs expect (infra/kafka runs the same
# for tikk's tests). SCRAM users can only be added to a KRaft cluster when its storage is
# formatted, so the first start formats it with them. Passwords come from the compose secrets
# and go through files readable by this user only, never a command line.
set -euo pipefail

conf=/tmp/kafka
data=/var/lib/kafka/data
umask 077
mkdir -p "$conf"

secret() { head -n 1 "/run/secrets/$1" | tr -d '\r\n'; }

cat > "$conf/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:9093
controller.listener.names=CONTROLLER
listeners=SASL_PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093
advertised.listeners=SASL_PLAINTEXT://kafka:9092
inter.broker.listener.name=SASL_PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="$(secret kafka-broker-password)";
log.dirs=$data
# One broker: internal topics with replication factor 1. tikk creates its own topics.
offsets.topic.replication.factor=1
# Few partitions of the offsets topic: a one-node stack's consumer groups are ready at once.
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
PROPERTIES

if [ ! -f "$data/meta.properties" ]; then
  # The storage tool reads its arguments from the @file: no password on a command line.
  args="$conf/format.args"
  for user in broker:kafka-broker-password tikk:kafka-password tikk-worker:kafka-worker-password; do
    printf -- '--add-scram\nSCRAM-SHA-256=[name=%s,password=%s]\n' \
      "${user%%:*}" "$(secret "${user#*:}")"
  done > "$args"
  # Its report lists the users' SCRAM keys: shown only if it fails.
  if ! report=$(/opt/kafka/bin/kafka-storage.sh format --config "$conf/server.properties" \
      --cluster-id "$(/opt/kafka/bin/kafka-storage.sh random-uuid)" "@$args" 2>&1); then
    rm -f "$args"
    echo "$report" >&2
    exit 1
  fi
  rm -f "$args"
fi

exec /opt/kafka/bin/kafka-server-start.sh "$conf/server.properties"
