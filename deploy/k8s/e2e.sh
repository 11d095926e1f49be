#!/usr/bin/env bash
# `make k8s-e2e`: the pipeline on a real single-node cluster (docs/kubernetes.md, section 10), as root:
#   1. the cluster (deploy/k8s/local-cluster.sh up: built once, then cached);
#   2. a docker engine (started here unless one answers), the images (deploy/docker/build.sh), saved
#      and imported into the cluster's containerd (once per image ID);
#   3. a broker of its own on the node's bridge address ($HOST_IP:$E2E_KAFKA_PORT, state
#      .state/kafka-k8s), which pods and this host both reach;
#   4. tests/k8s/e2e_demo.py, then e2e_cluster.py (pytest), its log in reports/k8s-e2e/run.log, its figures in
#      reports/k8s-e2e/figures.json;
#   5. stops what it started (broker, cluster, docker engine) unless K8S_E2E_KEEP=1.
# Exits with the tests' status; every step prints its duration and a failure names the step.
set -uo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
HOST_IP=${HOST_IP:-10.88.0.1}
E2E_KAFKA_PORT=${E2E_KAFKA_PORT:-29092}
KAFKA_STATE=.state/kafka-k8s
CLUSTER=deploy/k8s/local-cluster.sh
SOCK=${K8S_STATE:-$PWD/.state/k8s-cluster}/containerd/containerd.sock
REPORT=reports/k8s-e2e
T0=$SECONDS
mkdir -p "$REPORT"

took() { echo "== k8s-e2e: $1 took $((SECONDS - $2)) s (total $((SECONDS - T0)) s)"; }
fail() { echo "k8s-e2e FAILED at step: $1" >&2; exit 1; }

dockerd_pid=
stop_all() {
  [ "${K8S_E2E_KEEP:-}" = 1 ] && { echo "K8S_E2E_KEEP=1: cluster, broker and docker engine left running"; return; }
  "$VENV/bin/slipstream" kafka down --port "$E2E_KAFKA_PORT" --state "$KAFKA_STATE" --host "$HOST_IP" >/dev/null 2>&1
  "$CLUSTER" down
  [ -z "$dockerd_pid" ] || { kill "$dockerd_pid" 2>/dev/null; wait "$dockerd_pid" 2>/dev/null; }
}
trap stop_all EXIT

t=$SECONDS
"$CLUSTER" up || fail "cluster up"
took cluster $t

t=$SECONDS
if ! docker version >/dev/null 2>&1; then
  command -v dockerd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null; } || fail "apt-get install docker.io"
  dockerd --iptables=false --bridge=none >.state/dockerd-k8s.log 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 60); do docker version >/dev/null 2>&1 && break; sleep 1; done
  docker version >/dev/null 2>&1 || fail "dockerd start (.state/dockerd-k8s.log)"
fi
deploy/docker/build.sh || fail "image build"
images=("slipstream:$VERSION" "slipstream:$VERSION-control")
want=$(docker image inspect -f '{{.Id}}' "${images[@]}")  # imported once per image ID
stamp=$(dirname "$SOCK")/imported-images
if [ "$want" != "$(cat "$stamp" 2>/dev/null)" ]; then
  docker save "${images[@]}" | ctr -a "$SOCK" -n k8s.io images import --all-platforms - || fail "image import into containerd"
  echo "$want" >"$stamp"
fi
ctr -a "$SOCK" -n k8s.io images ls | awk 'NR == 1 || /slipstream/' | cut -c1-150
took images $t

t=$SECONDS
"$VENV/bin/slipstream" kafka up --port "$E2E_KAFKA_PORT" --state "$KAFKA_STATE" --host "$HOST_IP" || fail "broker up"
took broker $t

t=$SECONDS
KUBECONFIG=$("$CLUSTER" env | sed 's/^export KUBECONFIG=//') SLIPSTREAM_BOOTSTRAP="$HOST_IP:$E2E_KAFKA_PORT" \
  "$VENV/bin/python" -m pytest -p no:cacheprovider -v -s tests/k8s/e2e_demo.py tests/k8s/e2e_cluster.py 2>&1 | tee "$REPORT/run.log"
rc=${PIPESTATUS[0]}
took tests $t
"$CLUSTER" status | tee -a "$REPORT/run.log"
exit "$rc"
