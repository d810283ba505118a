#!/usr/bin/env bash
# Builds the container image (Dockerfile) without a Docker engine, with Debian's buildah, and
# starts it with Debian's podman: the image is only known to work once it has been built and
# run. Run by hand (`make image`), not by `make test`: the first run takes a few minutes.
#
#   1. A Python base image made locally, because no container registry is needed or assumed:
#      debootstrap of Debian 12 (bookworm, Python 3.11 like python:3.11-slim) from the Debian
#      mirror this host's apt uses, with python3, venv, pip and python-is-python3, brought up
#      to date from the suite's updates and security archives, committed as $BASE_IMAGE.
#      Made once; TIKK_REBUILD_BASE=1 makes it again.
#   2. The Dockerfile built on it (--build-arg PYTHON_IMAGE), as $IMAGE, in docker format so
#      that its HEALTHCHECK is kept (the OCI format has none).
#   3. The image started: `tikk --help`; `tikk dev` with the demo worker on loopback, whose
#      /healthz is fetched from the host, a task run to success and the image's HEALTHCHECK run;
#      then the image's own command line (a server on every interface with TLS and --auth)
#      with a throwaway certificate, its /healthz fetched over TLS through a published port,
#      a call without a token refused and one with a token answered.
#
# Storage is vfs (TIKK_STORAGE_DRIVER): it needs no overlay or FUSE support from the kernel,
# at the price of a full copy of the image for every container (seconds per start).
# Everything runs as root (the rootful engines, debootstrap); missing packages are installed
# with apt-get. Needs a Debian host (the base image comes from its apt sources, or from
# DEBIAN_MIRROR) and PyPI reachable for the build's pip.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=${TIKK_BASE_SUITE:-bookworm}
BASE_IMAGE=${TIKK_BASE_IMAGE:-localhost/tikk-python-base:$SUITE}
IMAGE=${TIKK_IMAGE:-localhost/tikk:local}
# Loopback ports of the checks: `tikk dev` on the host's network, and the published ports of
# the TLS server (its own 7070 and 7071 inside the container).
DEV_PORT=${TIKK_IMAGE_DEV_PORT:-17070}
TLS_PORT=${TIKK_IMAGE_TLS_PORT:-17170}
WORK="$PWD/.tools/image"
mkdir -p "$WORK"
# netavark and iptables: the published ports of the TLS check (a network of podman's own).
PACKAGES=(buildah podman runc netavark aardvark-dns iptables debootstrap curl openssl ca-certificates)
BASE_PACKAGES=python3,python3-venv,python3-pip,python-is-python3,ca-certificates

# TIKK_STORAGE_DRIVER=overlay: containers start without the copy where the kernel has
# overlayfs (a storage root holds one driver's images: a different driver needs an empty one).
DRIVER=${TIKK_STORAGE_DRIVER:-vfs}
BUILDAH=(buildah --storage-driver "$DRIVER")
# runc, not crun: Debian 12's crun (1.8) refuses a host whose cgroups are in hybrid mode (v1
# controllers with a v2 hierarchy mounted beside them: "cgroups in hybrid mode not
# supported").
PODMAN=(podman --storage-driver "$DRIVER" --runtime runc)
# podman gives a root container 1048576 open files and processes; without CAP_SYS_RESOURCE
# (as in some VMs) raising a limit above the host's fails ("setrlimit RLIMIT_NOFILE:
# Operation not permitted"), so ask for what this host allows.
nofile=$(ulimit -Hn)
if [ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ]; then nofile=1048576; fi
LIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)
# Without systemd, podman cannot schedule the periodic HEALTHCHECK: it logs "unable to get
# systemd connection to add healthchecks" (and to start and remove them) at every container's
# start and removal, lines podman_ leaves out; `podman healthcheck run` runs it on demand.
DEV_NAME=tikk-image-dev
TLS_NAME=tikk-image-tls

# podman_ SECONDS ARGS...: podman under a timeout, without those lines.
podman_() {
  local seconds=$1 && shift
  timeout "$seconds" "${PODMAN[@]}" "$@" 2> >(grep -v 'unable to get systemd connection' >&2)
}
say() { printf '\n== %s\n' "$*"; }
# Seconds since a $EPOCHREALTIME, to a tenth.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
fail() { echo "build-image: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || { echo "build-image: run as root (debootstrap, rootful buildah and podman)" >&2; exit 2; }

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'ok installed' || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  timeout 600 apt-get update -q
  timeout 900 apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "$(buildah --version), $(podman --version), $(runc --version | awk 'NR == 1')"

# The URI of the Debian archive that apt on this host reads a suite from (one-line or
# deb822 sources); empty when none.
apt_uri() {
  local suite=$1 lists=() sources=()
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$file" ] && lists+=("$file")
  done
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] && sources+=("$file")
  done
  {
    if [ ${#lists[@]} -gt 0 ]; then
      sed -E 's/\[[^]]*\]//' "${lists[@]}" | awk -v s="$suite" '$1 == "deb" && $3 == s { print $2 }'
    fi
    for file in "${sources[@]}"; do
      awk -v s="$suite" '
        function emit() { if (uri != "" && deb && hit) print uri; uri = ""; deb = 0; hit = 0 }
        /^[[:space:]]*$/ { emit(); next }
        $1 == "Types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
        $1 == "URIs:" { uri = $2 }
        $1 == "Suites:" { for (i = 2; i <= NF; i++) if ($i == s) hit = 1 }
        END { emit() }' "$file"
    done
  } | awk 'NR == 1'
}

# ---- 1. the base image
make_base() {
  local mirror security old_base began=$EPOCHREALTIME
  mirror=${DEBIAN_MIRROR:-$(apt_uri "$SUITE")}
  security=$(apt_uri "$SUITE-security")
  [ -n "$mirror" ] || fail "no Debian mirror for $SUITE in this host's apt sources (set DEBIAN_MIRROR)"
  say "base image $BASE_IMAGE: debootstrap $SUITE"
  rm -rf "$WORK/rootfs"
  local step=$EPOCHREALTIME
  timeout 1800 debootstrap --variant=minbase --include="$BASE_PACKAGES" \
    "$SUITE" "$WORK/rootfs" "$mirror" > "$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log"; fail "debootstrap failed"; }
  {
    echo "deb $mirror $SUITE main"
    echo "deb $mirror $SUITE-updates main"
    if [ -n "$security" ]; then echo "deb $security $SUITE-security main"; fi
  } > "$WORK/rootfs/etc/apt/sources.list"

  local ctr mnt
  ctr=$(timeout 60 "${BUILDAH[@]}" from --name tikk-base-work scratch)
  mnt=$(timeout 60 "${BUILDAH[@]}" mount "$ctr")
  timeout 600 tar -C "$WORK/rootfs" -cf - . | timeout 600 tar -C "$mnt" -xf -
  timeout 60 "${BUILDAH[@]}" umount "$ctr" >/dev/null
  rm -rf "$WORK/rootfs"
  echo "debootstrap and copy: $(since "$step") s"
  step=$EPOCHREALTIME
  # The suite's fixes since its release, then no package lists or archives in the image.
  timeout 900 "${BUILDAH[@]}" run --isolation chroot --network host "$ctr" -- sh -c \
    'export DEBIAN_FRONTEND=noninteractive && apt-get update -qq && apt-get upgrade -y -qq &&
     apt-get clean && rm -rf /var/lib/apt/lists/*' > "$WORK/upgrade.log" 2>&1 ||
    { tail -20 "$WORK/upgrade.log"; fail "apt-get upgrade in the base image failed"; }
  echo "apt-get upgrade: $(since "$step") s"
  timeout 60 "${BUILDAH[@]}" config \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd python3 --created-by "debootstrap --variant=minbase $SUITE" "$ctr"
  old_base=$(timeout 60 "${PODMAN[@]}" image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null || true)
  timeout 600 "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
  # The base it replaces, unless an image still stands on it.
  if [ -n "$old_base" ]; then timeout 60 "${BUILDAH[@]}" rmi "$old_base" >/dev/null 2>&1 || true; fi
  BASE_TIME="$(since "$began") s"
  echo "base image made in $BASE_TIME"
}

# A working container of an earlier run that stopped half-way is removed first.
timeout 60 "${BUILDAH[@]}" rm tikk-base-work >/dev/null 2>&1 || true
BASE_TIME="kept"
if [ "${TIKK_REBUILD_BASE:-0}" = 1 ] ||
  ! timeout 60 "${BUILDAH[@]}" inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  make_base
else
  say "base image $BASE_IMAGE: present (TIKK_REBUILD_BASE=1 makes it again)"
fi

# ---- 2. the image
say "buildah bud -t $IMAGE (PYTHON_IMAGE=$BASE_IMAGE)"
old_id=$(timeout 60 "${PODMAN[@]}" image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
# chroot isolation: the RUN steps need no cgroups or namespaces of their own. pip reaches
# PyPI through the host's network, trusting the certificate authorities this host trusts (a
# host behind a TLS-inspecting proxy has that proxy's CA there); the bind mount is not
# part of the image.
ca_mount=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  ca_mount=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
fi
began=$EPOCHREALTIME
timeout 1800 "${BUILDAH[@]}" bud --format docker --isolation chroot --network host --layers=false \
  "${ca_mount[@]}" --build-arg "PYTHON_IMAGE=$BASE_IMAGE" --tag "$IMAGE" . > "$WORK/build.log" 2>&1 ||
  { tail -40 "$WORK/build.log"; fail "the image build failed (log: .tools/image/build.log)"; }
BUILD_SECONDS=$(since "$began")
new_id=$(timeout 60 "${PODMAN[@]}" image inspect --format '{{.Id}}' "$IMAGE")
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
  timeout 60 "${BUILDAH[@]}" rmi "$old_id" >/dev/null 2>&1 || true
fi
echo "built in $BUILD_SECONDS s"
BASE_SIZE=$(timeout 60 "${PODMAN[@]}" images --format '{{.Size}}' "$BASE_IMAGE" 2>/dev/null)
IMAGE_SIZE=$(timeout 60 "${PODMAN[@]}" images --format '{{.Size}}' "$IMAGE" 2>/dev/null)
echo "$IMAGE: $IMAGE_SIZE (on $BASE_IMAGE: $BASE_SIZE)"

# ---- 3. the image started
cleanup() { podman_ 120 rm --force --ignore --time 5 "$DEV_NAME" "$TLS_NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "$DEV_PORT" $((DEV_PORT + 1)) "$TLS_PORT" $((TLS_PORT + 1)); do
  port_free "$port" || fail "127.0.0.1:$port is in use (TIKK_IMAGE_DEV_PORT, TIKK_IMAGE_TLS_PORT)"
done

# Fetches a /healthz until it answers "ok" (curl's further arguments), or fails after 90 s.
wait_healthz() {
  local url=$1 name=$2; shift 2
  for _ in $(seq 1 360); do
    if [ "$(curl -fsS --max-time 2 "$@" "$url" 2>/dev/null)" = ok ]; then return; fi
    sleep 0.25
  done
  timeout 60 "${PODMAN[@]}" logs "$name" | tail -20
  fail "$url did not answer within 90 s"
}

say "podman run $IMAGE --help"
help=$(podman_ 300 run --rm --network none "${LIMITS[@]}" "$IMAGE" --help)
printf '%s\n' "$help" | awk 'NR <= 3'

say "podman run $IMAGE dev (embedded SQLite, demo worker) on 127.0.0.1:$DEV_PORT"
# Created first, then started: with vfs, creating a container copies the whole image.
began=$EPOCHREALTIME
podman_ 300 create --name "$DEV_NAME" --network host "${LIMITS[@]}" \
  --env "TIKK_HEALTH_URL=http://127.0.0.1:$((DEV_PORT + 1))/healthz" "$IMAGE" \
  dev --listen "127.0.0.1:$DEV_PORT" --http "127.0.0.1:$((DEV_PORT + 1))" --data-dir /var/lib/tikk \
  --worker examples.demo_worker:worker >/dev/null
DEV_CREATE_SECONDS=$(since "$began")
began=$EPOCHREALTIME
podman_ 120 start "$DEV_NAME" >/dev/null
wait_healthz "http://127.0.0.1:$((DEV_PORT + 1))/healthz" "$DEV_NAME"
DEV_HEALTHZ_SECONDS=$(since "$began")
echo "container created in $DEV_CREATE_SECONDS s;" \
  "/healthz answered ok $DEV_HEALTHZ_SECONDS s after its start"
dev_tikk() { timeout 60 "${PODMAN[@]}" exec "$DEV_NAME" tikk "$@" --server "127.0.0.1:$DEV_PORT"; }
task=$(dev_tikk task create --queue demo --handler greet --payload '{"name": "image"}' --json |
  sed -n 's/^ *"id": "\([0-9a-f]*\)",*$/\1/p' | awk 'NR == 1')
[ -n "$task" ] || fail "tikk task create gave no task id"
state=
for _ in $(seq 1 60); do
  state=$(dev_tikk task get "$task" --json |
    sed -n 's/^ *"state": "\([A-Z_]*\)",*$/\1/p' | awk 'NR == 1') || true
  [ "$state" = TASK_STATE_SUCCEEDED ] && break
  sleep 0.5
done
[ "$state" = TASK_STATE_SUCCEEDED ] || fail "task $task is $state after 30 s"
echo "task $task (demo/greet): $state"
dev_tikk runs task "$task"
podman_ 60 healthcheck run "$DEV_NAME" >/dev/null || fail "the image's HEALTHCHECK failed"
health=$(timeout 60 "${PODMAN[@]}" inspect --format '{{.State.Health.Status}}' "$DEV_NAME" 2>/dev/null)
echo "HEALTHCHECK: $health"
podman_ 120 rm --force --time 10 "$DEV_NAME" >/dev/null

say "podman run $IMAGE (its own command line: TLS, --auth) published on 127.0.0.1:$TLS_PORT"
# A throwaway CA and server certificate (localhost, 127.0.0.1), like deploy/compose's.
TLS="$WORK/tls"
rm -rf "$TLS" && mkdir -p "$TLS" && chmod 700 "$TLS"
(
  cd "$TLS"
  timeout 60 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj "/CN=tikk image check CA" -keyout ca.key -out ca.pem 2>/dev/null
  timeout 60 openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout tls.key -out tls.csr 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > tls.ext
  timeout 60 openssl x509 -req -days 1 -in tls.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -extfile tls.ext -out tls.crt 2>/dev/null
  # Read by the container's uid 10001; the folder (0700) keeps this host's other users out.
  chmod 644 tls.crt tls.key ca.pem
)
began=$EPOCHREALTIME
podman_ 300 create --name "$TLS_NAME" "${LIMITS[@]}" \
  --publish "127.0.0.1:$TLS_PORT:7070" --publish "127.0.0.1:$((TLS_PORT + 1)):7071" \
  --env TIKK_HEALTH_URL=https://127.0.0.1:7071/healthz \
  --volume "$TLS/tls.crt:/etc/tikk/tls/tls.crt:ro" --volume "$TLS/tls.key:/etc/tikk/tls/tls.key:ro" \
  --volume "$TLS/ca.pem:/etc/tikk/tls/ca.pem:ro" "$IMAGE" >/dev/null
TLS_CREATE_SECONDS=$(since "$began")
began=$EPOCHREALTIME
podman_ 120 start "$TLS_NAME" >/dev/null
wait_healthz "https://127.0.0.1:$((TLS_PORT + 1))/healthz" "$TLS_NAME" --cacert "$TLS/ca.pem"
TLS_HEALTHZ_SECONDS=$(since "$began")
echo "container created in $TLS_CREATE_SECONDS s;" \
  "/healthz answered ok over TLS $TLS_HEALTHZ_SECONDS s after its start"
tls_tikk() {
  timeout 60 "${PODMAN[@]}" exec "$TLS_NAME" tikk "$@" --server 127.0.0.1:7070 \
    --tls-ca /etc/tikk/tls/ca.pem --tls-server-name localhost
}
if refused=$(tls_tikk queues list 2>&1); then fail "a call without a token was answered: $refused"; fi
echo "without a token: $refused"
timeout 60 "${PODMAN[@]}" exec "$TLS_NAME" tikk auth create --name image-check --role 'admin:*' \
  --token-file /var/lib/tikk/check.token --data-dir /var/lib/tikk
# A server sees a new credential at its next reload of the credential store (seconds).
answered=
for _ in $(seq 1 40); do
  if tls_tikk queues list --token-file /var/lib/tikk/check.token >/dev/null 2>&1; then
    answered=1 && break
  fi
  sleep 0.5
done
[ -n "$answered" ] ||
  fail "a call with the token was not answered: $(tls_tikk queues list --token-file /var/lib/tikk/check.token 2>&1)"
echo "with the token: answered"
podman_ 60 healthcheck run "$TLS_NAME" >/dev/null || fail "the image's HEALTHCHECK failed (TLS)"
echo "HEALTHCHECK (TLS): healthy"

say "build-image: all passed"
echo "base image: $BASE_TIME ($BASE_SIZE); image build: $BUILD_SECONDS s; image size: $IMAGE_SIZE"
echo "containers created in $DEV_CREATE_SECONDS s and $TLS_CREATE_SECONDS s ($DRIVER storage)"
echo "/healthz after the start: $DEV_HEALTHZ_SECONDS s (dev), $TLS_HEALTHZ_SECONDS s (server, TLS)"
