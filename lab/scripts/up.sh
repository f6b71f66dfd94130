#!/usr/bin/env bash
# Starts the lab's local Kubernetes control plane on 127.0.0.1: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and a kwok fake node.
# Writes $DANKI_CACHE/lab/kubeconfig. Idempotent: running parts are kept.
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
source "$(dirname "$0")/lib.sh"

"$here/build.sh" etcd kube kwok

mkdir -p "$run/pki" "$run/etcd"
pki=$run/pki

# Credentials: a service-account signing key and one admin token.
if [ ! -s "$pki/sa.key" ]; then
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi
if [ ! -s "$pki/tokens.csv" ]; then
	token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	echo "$token,danki-admin,danki-admin,system:masters" >"$pki/tokens.csv"
	chmod 600 "$pki/tokens.csv"
fi
token=$(cut -d, -f1 "$pki/tokens.csv")

start etcd "$bin/etcd" --name lab --data-dir "$run/etcd" \
	--listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
	--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster "lab=http://127.0.0.1:$ETCD_PEER_PORT" --quota-backend-bytes 2147483648 --log-level warn
wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health"

start kube-apiserver "$bin/kube-apiserver" \
	--etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
	--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
	--cert-dir "$pki" --token-auth-file "$pki/tokens.csv" \
	--authorization-mode Node,RBAC \
	--service-account-issuer https://kubernetes.default.svc.cluster.local \
	--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
	--service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true \
	--enable-priority-and-fairness=false --profiling=false \
	--enable-aggregator-routing=true
wait_for kube-apiserver 90 curl -fsSk -H "Authorization: Bearer $token" "https://127.0.0.1:$APISERVER_PORT/readyz"

cat >"$kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: danki-lab
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $pki/apiserver.crt
users:
- name: danki-admin
  user:
    token: $token
contexts:
- name: danki-lab
  context: {cluster: danki-lab, user: danki-admin, namespace: default}
current-context: danki-lab
KUBECONFIG
chmod 600 "$kubeconfig"

start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$kubeconfig" \
	--leader-elect=false --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
	--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/apiserver.crt" \
	--use-service-account-credentials=false --controllers '*,-nodeipam'
start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$kubeconfig" \
	--leader-elect=false --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT"
# kwok keeps the lab node Ready (node stages) but leaves its pods alone: the
# lab runner (lab/scripts/mesh.sh) owns their status and runs them as processes.
awk 'BEGIN { RS = "\n---\n"; ORS = "" } { sub(/^---\n/, "") } !/kind: Pod/ { print "---\n" $0 "\n" }' "$bin/kwok-stages.yaml" >"$run/kwok-node-stages.yaml"
grep -q 'kind: Node' "$run/kwok-node-stages.yaml" || die "no node stages in $bin/kwok-stages.yaml: rerun lab/scripts/build.sh kwok"
start kwok "$bin/kwok" --kubeconfig "$kubeconfig" --config "$run/kwok-node-stages.yaml" \
	--manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
	--server-address "127.0.0.1:$KWOK_PORT"

# One fake node, kept Ready by kwok, whose pods get IPs from its pod CIDR;
# ephemeral storage as a node has (upstream's Argo Deployment requests 1Gi).
kubectl_lab apply -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: $LAB_NODE
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {kubernetes.io/hostname: $LAB_NODE, kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok}
spec:
  podCIDR: $LAB_POD_CIDR
  podCIDRs: [$LAB_POD_CIDR]
status:
  allocatable: {cpu: "32", memory: 64Gi, ephemeral-storage: 100Gi, pods: "110"}
  capacity: {cpu: "32", memory: 64Gi, ephemeral-storage: 100Gi, pods: "110"}
NODE
wait_for "node $LAB_NODE" 60 kubectl_lab wait --for=condition=Ready "node/$LAB_NODE" --timeout=1s
wait_for "default service account" 60 kubectl_lab get serviceaccount default -n default

log "control plane up: kubectl --kubeconfig $kubeconfig get nodes,pods -A"

# Pod network, lab runner, istiod + Envoy, Prometheus, Argo Rollouts.
[ "${LAB_CONTROL_PLANE_ONLY:-}" = 1 ] || "$here/mesh.sh" up
