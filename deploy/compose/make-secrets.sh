#!/usr/bin/env bash
# Makes the files compose.yaml reads as secrets, into ./secrets: a password for each backend
# user, tikk's delivery keys file (`tikk delivery-keys create`, run in the tikk image), and a
# CA with the certificate the tikk server presents (names: server, localhost, 127.0.0.1).
# A file that exists is kept, so running it again only adds what is missing. tikk's Cassandra
# password changes by deleting its file, running this and `docker compose up -d` again; the
# superuser's is set on the first start only, and Kafka's users when its storage is first
# formatted (a new Kafka password needs a fresh kafka-data volume).
# Needs docker and openssl.
set -euo pipefail
cd "$(dirname "$0")"
umask 077
mkdir -p secrets
chmod 700 secrets

image=${TIKK_IMAGE:-tikk:local}
if ! docker image inspect "$image" >/dev/null 2>&1; then
  docker build -t "$image" ../..
fi

# Hex only: the passwords go into CQL, a JAAS line and the SCRAM format arguments unquoted.
for user in cassandra-admin cassandra kafka-broker kafka kafka-worker zookeeper; do
  [ -s "secrets/$user.password" ] || openssl rand -hex 24 > "secrets/$user.password"
done

if [ ! -s secrets/delivery-keys ]; then
  docker run --rm --user "$(id -u):$(id -g)" --workdir /tmp -v "$PWD/secrets:/out" "$image" \
    delivery-keys create /out/delivery-keys
fi

if [ ! -s secrets/server.pem ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
    -subj "/CN=tikk compose CA" -keyout secrets/ca.key -out secrets/ca.pem
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=server" \
    -keyout secrets/server.key -out secrets/server.csr
  printf 'subjectAltName=DNS:server,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
    > secrets/server.ext
  openssl x509 -req -days 825 -in secrets/server.csr -CA secrets/ca.pem -CAkey secrets/ca.key \
    -CAcreateserial -extfile secrets/server.ext -out secrets/server.pem
  rm -f secrets/server.csr secrets/server.ext secrets/ca.srl
fi

# Compose mounts each secret file as it is on this host, and the services read them as
# different users (cassandra, kafka's appuser, tikk 10001, prometheus' nobody), so the files
# are world-readable and the folder (0700) keeps this host's other users out. The CA's key
# is mounted nowhere.
chmod 644 secrets/*
chmod 600 secrets/ca.key
ls -l secrets
