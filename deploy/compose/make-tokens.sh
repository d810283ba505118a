#!/bin/sh
# The credentials the compose stack's own clients present (with --auth every call needs one),
# made once into the tikk-tokens volume: `tikk auth create` writes the token into its file
# only, and the store keeps a salted hash of it. Each file then goes to the one user that reads
# it: the worker's to tikk (10001), the scrape token to Prometheus (nobody, 65534).
set -eu

dir=/var/lib/tikk-tokens
if [ ! -s "$dir/worker.token" ]; then
  tikk auth create --name demo-worker --role worker:demo --token-file "$dir/worker.token"
fi
if [ ! -s "$dir/scrape.token" ]; then
  # Any valid credential may scrape; this one may read only a namespace nobody uses.
  tikk auth create --name prometheus --role read:prometheus --token-file "$dir/scrape.token"
fi
chown 10001:10001 "$dir/worker.token"
chown 65534:65534 "$dir/scrape.token"
chmod 0400 "$dir/worker.token" "$dir/scrape.token"
