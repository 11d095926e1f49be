#!/usr/bin/env bash
# A single-node Kubernetes cluster from parts the registries here serve (docs/kubernetes.md, Local
# cluster), run from anywhere, as root:
#   deploy/k8s/local-cluster.sh up       # build (once) and start etcd, the control plane and a kubelet
#   deploy/k8s/local-cluster.sh status   # what runs, the node and the versions
#   deploy/k8s/local-cluster.sh down     # stop everything it started (by PID) and unmount the pods
#   deploy/k8s/local-cluster.sh build    # only build the Kubernetes binaries
#   deploy/k8s/local-cluster.sh env      # the KUBECONFIG line to eval
# Parts: etcd from Debian's etcd-server; containerd, runc, crun and the CNI plugins (bridge,
# host-local, loopback) from Debian (installed when absent);
# kube-apiserver, kube-controller-manager, kube-scheduler and kubelet built with go from the
# k8s.io/kubernetes module through the Go module proxy (a build module written under the cache that
# requires k8s.io/kubernetes and replaces each staging module by its published v0.Y release), cached in
# $K8S_CACHE so a second `up` takes seconds. Certificates (openssl) and the kubeconfigs are made on
# first `up` under $K8S_STATE. Pods get addresses on a bridge (CNI bridge plugin, $POD_CIDR) whose
# gateway $HOST_IP is this machine: a broker listening there is reached by the pods and by this host
# alike. No kube-proxy: one iptables DNAT makes the kubernetes Service (the in-cluster API address)
# reach the API server. The pause image is built here too (a static Go binary in an OCI archive).
# Nothing else is fetched. Every step prints its duration; a failure names the step and shows the component's log.
set -euo pipefail
cd "$(dirname "$0")/../.."
K8S_VERSION=${K8S_VERSION:-v1.32.13}
K8S_CACHE=${K8S_CACHE:-$PWD/.state/k8s-bin/$K8S_VERSION}
K8S_STATE=${K8S_STATE:-$PWD/.state/k8s-cluster}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
COMPONENTS="kube-apiserver kube-controller-manager kube-scheduler kubelet"
ETCD_PORT=${ETCD_PORT:-23790}
API_PORT=${API_PORT:-26443}
NODE=${NODE:-slipstream-node}
BRIDGE=${BRIDGE:-slip0}            # the pods' bridge; the node's address is its gateway
HOST_IP=${HOST_IP:-10.88.0.1}      # the node's (and the broker's) address the pods reach
POD_CIDR=${POD_CIDR:-10.88.0.0/16}
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1                # the kubernetes Service, DNATed to the API server (no kube-proxy)
PAUSE_IMAGE=slipstream.local/pause:3.10
RUNTIME=${RUNTIME:-runc}           # the OCI runtime of the pods: runc or crun

STEP_WHAT=cluster
. deploy/step.sh  # step NAME CMD...: runs CMD, prints its duration, names the step when it fails

# ---------------------------------------------------------------- packages and binaries
install_packages() {
  local missing=() cmd pkg
  for cmd_pkg in etcd:etcd-server containerd:containerd runc:runc crun:crun openssl:openssl \
                 /usr/lib/cni/bridge:containernetworking-plugins iptables:iptables curl:curl; do
    cmd=${cmd_pkg%%:*}; pkg=${cmd_pkg#*:}
    command -v "$cmd" >/dev/null || [ -x "$cmd" ] || missing+=("$pkg")
  done
  [ ${#missing[@]} = 0 ] && return 0
  echo "apt: ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

staging_replaces() {  # the k8s.io/kubernetes go.mod's staging replaces, as published releases
  local gomod mod v
  gomod=$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod" | sort -u \
    | while read -r mod; do  # none served (the sample-* modules): not needed by the commands, left out
        v=$(staging_version "$mod"); [ -z "$v" ] || echo "replace $mod => $mod $v"; done
}

staging_version() {  # a staging module's v0.MINOR.PATCH; else the newest v0.MINOR release the proxy serves
  local want="v0.${K8S_VERSION#v1.}"    # (k8s.io/endpointslice v0.32.13's zip is refused: 403 "not available")
  if "$GO" mod download "$1@$want" >/dev/null 2>&1; then echo "$want"; return; fi
  "$GO" list -m -versions "$1" | tr ' ' '\n' | grep "^${want%.*}\.[0-9]*\$" | sort -V | tail -1
}

write_build_module() {  # $1: directory; a go.mod requiring k8s.io/kubernetes, the staging modules replaced
  local dir=$1 c
  mkdir -p "$dir"
  { echo "module slipstream.local/k8sbuild"; echo; echo "go 1.23"; echo
    echo "require k8s.io/kubernetes $K8S_VERSION"; echo
    staging_replaces; } >"$dir/go.mod" || return 1
  { echo "//go:build tools"; echo; echo "package k8sbuild"; echo; echo "import ("
    for c in $COMPONENTS; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done; echo ")"; } >"$dir/tools.go"
  (cd "$dir" && GOFLAGS=-mod=mod "$GO" mod tidy) || return 1
  grep '=> k8s.io/' "$dir/go.mod" | grep -v " v0.${K8S_VERSION#v1.}\$" | sed 's/^/staging release substituted: /'
}

build_binaries() {  # each missing component; the versions stamped as a release build would
  local dir=$K8S_CACHE/src minor=${K8S_VERSION#v1.} ldflags c t0
  minor=${minor%%.*}
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  write_build_module "$dir" || return 1
  mkdir -p "$K8S_CACHE/bin"
  for c in $COMPONENTS; do
    [ -x "$K8S_CACHE/bin/$c" ] && continue
    t0=$SECONDS
    (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 "$GO" build -trimpath -ldflags "$ldflags" \
      -o "$K8S_CACHE/bin/$c.tmp" "k8s.io/kubernetes/cmd/$c") || return 1
    mv "$K8S_CACHE/bin/$c.tmp" "$K8S_CACHE/bin/$c"
    echo "built $c $K8S_VERSION in $((SECONDS - t0)) s ($(du -h "$K8S_CACHE/bin/$c" | cut -f1))"
  done
}

binaries_present() {
  local c; for c in $COMPONENTS; do [ -x "$K8S_CACHE/bin/$c" ] || return 1; done
}

build() {
  if binaries_present; then echo "binaries $K8S_VERSION present in $K8S_CACHE/bin, reused"; return 0; fi
  step "build Kubernetes $K8S_VERSION from the Go module proxy ($("$GO" version | cut -d' ' -f3))" build_binaries
}

# ---------------------------------------------------------------- the pause image (the pod sandbox)
make_pause_image() {  # a static Go pause binary in an OCI archive, imported into containerd's k8s.io
  local d=$K8S_CACHE/pause lay cfg man idx
  if [ ! -f "$d/pause.oci.tar" ]; then
    rm -rf "$d" && mkdir -p "$d/src" "$d/rootfs" "$d/oci/blobs/sha256"
    printf 'module pause\n\ngo 1.22\n' >"$d/src/go.mod"
    cat >"$d/src/main.go" <<'GO'
// pause: holds a pod's namespaces until SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
GO
    (cd "$d/src" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w" -o ../rootfs/pause .)
    tar -C "$d/rootfs" --owner=0 --group=0 --mtime=@0 -cf "$d/layer.tar" pause
    lay=$(blob "$d" "$d/layer.tar")
    printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
      "${lay%% *}" >"$d/config.json"
    cfg=$(blob "$d" "$d/config.json")
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
      ${cfg} ${lay} >"$d/manifest.json"
    man=$(blob "$d" "$d/manifest.json")
    printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
      ${man} "$PAUSE_IMAGE" "${PAUSE_IMAGE##*:}" >"$d/oci/index.json"
    echo '{"imageLayoutVersion":"1.0.0"}' >"$d/oci/oci-layout"
    tar -C "$d/oci" -cf "$d/pause.oci.tar" .
  fi
  ctr_ images import --all-platforms "$d/pause.oci.tar" >/dev/null
}

blob() {  # blob DIR FILE: stores FILE as a blob of DIR's OCI layout, prints "HEX SIZE"
  local hex; hex=$(sha256sum "$2" | cut -d' ' -f1)
  cp "$2" "$1/oci/blobs/sha256/$hex"
  echo "$hex $(stat -c %s "$2")"
}

ctr_() { ctr -a "$K8S_STATE/containerd/containerd.sock" -n k8s.io "$@"; }

# ---------------------------------------------------------------- certificates and kubeconfigs
PKI() { echo "$K8S_STATE/pki"; }

cert() {  # cert NAME CN [O] [SANS]: a key and a certificate signed by the cluster CA
  local p; p=$(PKI)
  [ -f "$p/$1.crt" ] && return 0
  openssl genrsa -out "$p/$1.key" 2048 2>/dev/null
  openssl req -new -key "$p/$1.key" -subj "/CN=$2${3:+/O=$3}" -out "$p/$1.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s' \
    "${4:+subjectAltName=$4}" >"$p/$1.ext"
  openssl x509 -req -in "$p/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 365 \
    -extfile "$p/$1.ext" -out "$p/$1.crt" 2>/dev/null
}

kubeconfig() {  # kubeconfig NAME: $K8S_STATE/NAME.kubeconfig with the client certificate NAME
  local p f; p=$(PKI); f=$K8S_STATE/$1.kubeconfig
  [ -f "$f" ] && return 0
  KUBECONFIG=$f kubectl config set-cluster local --server "https://127.0.0.1:$API_PORT" \
    --certificate-authority "$p/ca.crt" --embed-certs >/dev/null
  KUBECONFIG=$f kubectl config set-credentials "$1" --client-certificate "$p/$1.crt" \
    --client-key "$p/$1.key" --embed-certs >/dev/null
  KUBECONFIG=$f kubectl config set-context local --cluster local --user "$1" >/dev/null
  KUBECONFIG=$f kubectl config use-context local >/dev/null
}

make_pki() {
  local p; p=$(PKI); mkdir -p "$p"
  if [ ! -f "$p/ca.crt" ]; then
    openssl genrsa -out "$p/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$p/ca.key" -subj "/CN=slipstream-local-ca" -days 365 -out "$p/ca.crt" 2>/dev/null
  fi
  [ -f "$p/sa.key" ] || { openssl genrsa -out "$p/sa.key" 2048 2>/dev/null; openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null; }
  cert apiserver kube-apiserver "" "IP:127.0.0.1,IP:$HOST_IP,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert admin admin system:masters
  cert controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler
  cert kubelet "system:node:$NODE" system:nodes "IP:127.0.0.1,IP:$HOST_IP,DNS:$NODE"
  for k in admin controller-manager scheduler kubelet; do kubeconfig $k; done
}

# ---------------------------------------------------------------- the node's network (no CNI daemon)
make_network() {  # the pods' bridge with the node's address, the CNI config, the kubernetes Service
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip addr show dev "$BRIDGE" | grep -q "inet $HOST_IP/" || ip addr add "$HOST_IP/16" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  mkdir -p "$K8S_STATE/cni"
  cat >"$K8S_STATE/cni/10-slipstream.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "slipstream", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$HOST_IP"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$K8S_STATE/cni-ipam"}}]}
JSON
  # what kube-proxy would do for the one Service the pods need: kubernetes (the tuner's API server)
  iptables -t nat -C PREROUTING -d "$SERVICE_IP/32" -p tcp --dport 443 -j DNAT --to-destination "$HOST_IP:$API_PORT" 2>/dev/null \
    || iptables -t nat -A PREROUTING -d "$SERVICE_IP/32" -p tcp --dport 443 -j DNAT --to-destination "$HOST_IP:$API_PORT"
}

drop_network() {
  iptables -t nat -D PREROUTING -d "$SERVICE_IP/32" -p tcp --dport 443 -j DNAT --to-destination "$HOST_IP:$API_PORT" 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$K8S_STATE/cni-ipam"
}

# ---------------------------------------------------------------- processes
start() {  # start NAME CMD...: in the background, log and PID file under $K8S_STATE
  local name=$1; shift
  if pid_of "$name" >/dev/null; then echo "$name already runs (pid $(pid_of "$name"))"; return 0; fi
  mkdir -p "$K8S_STATE/logs" "$K8S_STATE/run"
  setsid "$@" >"$K8S_STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$K8S_STATE/run/$name.pid"
}

pid_of() {
  local f=$K8S_STATE/run/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f"); kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

stop() {  # stop NAME: SIGTERM by PID, SIGKILL after 20 s
  local pid; pid=$(pid_of "$1") || { rm -f "$K8S_STATE/run/$1.pid"; return 0; }
  kill "$pid"
  for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$K8S_STATE/run/$1.pid"
}

wait_for() {  # wait_for NAME SECONDS CMD...: until CMD succeeds; the log's tail when it never does
  local name=$1 secs=$2; shift 2
  for _ in $(seq $((secs * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    pid_of "$name" >/dev/null || break
    sleep 0.2
  done
  echo "$name did not become ready; its log:" >&2; tail -n 30 "$K8S_STATE/logs/$name.log" >&2; return 1
}

kctl() { kubectl --kubeconfig "$K8S_STATE/admin.kubeconfig" "$@"; }

start_etcd() {
  start etcd etcd --name local --data-dir "$K8S_STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "local=http://127.0.0.1:$((ETCD_PORT + 1))" --quota-backend-bytes 1073741824
  wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"
}

start_apiserver() {
  local p; p=$(PKI)
  start kube-apiserver "$K8S_CACHE/bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 0.0.0.0 --secure-port "$API_PORT" --advertise-address "$HOST_IP" \
    --service-cluster-ip-range "$SERVICE_CIDR" --client-ca-file "$p/ca.crt" \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged=true \
    --profiling=false --endpoint-reconciler-type lease --kubelet-preferred-address-types InternalIP,Hostname
  wait_for kube-apiserver 120 kctl get --raw /readyz
}

start_controllers() {
  local p; p=$(PKI)
  start kube-controller-manager "$K8S_CACHE/bin/kube-controller-manager" \
    --kubeconfig "$K8S_STATE/controller-manager.kubeconfig" --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port "$((API_PORT + 1))" \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --use-service-account-credentials=true --service-cluster-ip-range "$SERVICE_CIDR"
  start kube-scheduler "$K8S_CACHE/bin/kube-scheduler" --kubeconfig "$K8S_STATE/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port "$((API_PORT + 2))"
}

restrict_oom() {  # true when this process may not lower its oom_score_adj (CAP_SYS_RESOURCE missing)
  local cap; cap=$(awk '/^CapEff/ {print $2}' /proc/self/status)
  (( (16#$cap >> 24) & 1 )) && echo false || echo true
}

start_containerd() {
  mkdir -p "$K8S_STATE/containerd"
  cat >"$K8S_STATE/containerd/config.toml" <<TOML
version = 2
root = "$K8S_STATE/containerd/root"
state = "$K8S_STATE/containerd/state"
[grpc]
  address = "$K8S_STATE/containerd/containerd.sock"
[ttrpc]
  address = "$K8S_STATE/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # no CAP_SYS_RESOURCE here (a VM sandbox): a container's oom_score_adj may not go below containerd's
  restrict_oom_score_adj = $(restrict_oom)
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "$RUNTIME"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
        BinaryName = "$(command -v crun)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$K8S_STATE/cni"
TOML
  start containerd containerd --config "$K8S_STATE/containerd/config.toml"
  wait_for containerd 30 ctr_ version
}

start_kubelet() {
  mkdir -p "$K8S_STATE/kubelet"
  cat >"$K8S_STATE/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $(PKI)/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$K8S_STATE/containerd/containerd.sock
address: $HOST_IP
port: $((API_PORT + 3))
healthzBindAddress: 127.0.0.1
healthzPort: $((API_PORT + 4))
readOnlyPort: 0
tlsCertFile: $(PKI)/kubelet.crt
tlsPrivateKeyFile: $(PKI)/kubelet.key
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 95
imageGCLowThresholdPercent: 90
evictionHard: {memory.available: 100Mi, nodefs.available: 5%, imagefs.available: 5%}
YAML
  start kubelet "$K8S_CACHE/bin/kubelet" --config "$K8S_STATE/kubelet.yaml" \
    --kubeconfig "$K8S_STATE/kubelet.kubeconfig" --root-dir "$K8S_STATE/kubelet" \
    --hostname-override "$NODE" --node-ip "$HOST_IP"
  wait_for kubelet 60 curl -sf "http://127.0.0.1:$((API_PORT + 4))/healthz"
  # the kubelet answers /healthz before it has registered its node, and `wait --for=condition`
  # refuses an object that does not exist yet: wait for the node's creation first
  { kctl wait --for=create "node/$NODE" --timeout=60s && kctl wait --for=condition=Ready "node/$NODE" --timeout=90s; } >/dev/null || {
    echo "node $NODE not Ready; kubelet log:" >&2; tail -n 30 "$K8S_STATE/logs/kubelet.log" >&2; return 1; }
}

# ---------------------------------------------------------------- commands
up() {
  local t0=$SECONDS
  step "packages (etcd-server containerd runc crun containernetworking-plugins openssl)" install_packages
  build
  step "certificates and kubeconfigs" make_pki
  step "network (bridge $BRIDGE $HOST_IP, CNI config)" make_network
  step "etcd $(etcd --version | sed -n 's/etcd Version: //p')" start_etcd
  step "kube-apiserver" start_apiserver
  step "kube-controller-manager, kube-scheduler" start_controllers
  step "containerd $(containerd --version | cut -d' ' -f3)" start_containerd
  step "pause image $PAUSE_IMAGE" make_pause_image
  step "kubelet (node $NODE)" start_kubelet
  echo "cluster up in $((SECONDS - t0)) s: export KUBECONFIG=$K8S_STATE/admin.kubeconfig"
  status
}

delete_workloads() {  # every pod stopped through the kubelet, so it tears the sandboxes down (CNI DEL)
  pid_of kube-apiserver >/dev/null && pid_of kubelet >/dev/null || return 0
  kctl delete namespace -l slipstream.io/e2e --wait=false >/dev/null 2>&1 || true
  kctl delete deployments,statefulsets,daemonsets,jobs,replicasets --all --all-namespaces --wait=false >/dev/null 2>&1 || true
  kctl delete pods --all --all-namespaces --wait=false >/dev/null 2>&1 || true
  kctl wait --for=delete pods --all --all-namespaces --timeout=60s >/dev/null 2>&1 || true
}

kill_leftover_tasks() {  # tasks the kubelet did not stop: killed through containerd, by ID
  pid_of containerd >/dev/null || return 0
  local id
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
  for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ tasks rm -f "$id" >/dev/null 2>&1 || true; ctr_ containers rm "$id" >/dev/null 2>&1 || true; done
}

unmount_state() {  # the pods' volumes, the snapshots and network namespaces mounted under the state
  local m s; s=$(realpath "$K8S_STATE")  # /proc/mounts names real paths (.state may be a symlink)
  for m in $(awk -v s="$s/" 'index($2, s) == 1 {print $2}' /proc/mounts | sort -r); do umount -l "$m" || true; done
}

down() {
  delete_workloads
  stop kubelet
  kill_leftover_tasks
  stop containerd
  stop kube-scheduler
  stop kube-controller-manager
  stop kube-apiserver
  stop etcd
  unmount_state
  drop_network
  rm -rf "$K8S_STATE/etcd" "$K8S_STATE/kubelet" "$K8S_STATE/containerd/state"
  echo "cluster down (binaries kept in $K8S_CACHE/bin, images in $K8S_STATE/containerd/root)"
}

status() {
  local c rss=0 pid kb
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet; do
    if pid=$(pid_of $c); then
      kb=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status"); rss=$((rss + kb))
      printf '%-24s pid %-7s rss %5d MiB\n' "$c" "$pid" $((kb / 1024))
    else printf '%-24s not running\n' "$c"; fi
  done
  printf 'memory (rss, all components): %d MiB\n' $((rss / 1024))
  pid_of kube-apiserver >/dev/null || return 1
  kctl version 2>/dev/null | sed 's/^/  /'
  kctl get nodes -o wide 2>/dev/null | sed 's/^/  /'
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  build) install_packages; build ;;
  env) echo "export KUBECONFIG=$K8S_STATE/admin.kubeconfig" ;;
  *) echo "usage: $0 up|down|status|build|env" >&2; exit 2 ;;
esac
