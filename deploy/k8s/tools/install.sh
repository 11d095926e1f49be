#!/usr/bin/env bash
# The offline validators of the generated Kubernetes objects (docs/kubernetes.md, Validation), into
# .state/k8s-tools (git-ignored); each is skipped when already there:
#   bin/kustomize  kustomize v5.5.0, built from its Go module (go install through the module proxy)
#   strimzi/       Strimzi's KafkaTopic schemas (npm ci of package-lock.json here) and check-strimzi.mjs
# Needs go and npm. .ci/run calls it; tests/unit/tuner/test_k8s_validate.py uses what it installed.
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=deploy/k8s/tools
dest=.state/k8s-tools
KUSTOMIZE_VERSION=v5.5.0
mkdir -p "$dest/bin"
if ! "$dest/bin/kustomize" version 2>/dev/null | grep -q .; then
  echo "k8s-tools: building kustomize $KUSTOMIZE_VERSION"
  GOBIN="$PWD/$dest/bin" GOFLAGS=-mod=mod go install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
fi
if ! cmp -s "$here/package-lock.json" "$dest/strimzi/package-lock.json" \
   || ! cmp -s "$here/check-strimzi.mjs" "$dest/strimzi/check-strimzi.mjs"; then
  echo "k8s-tools: installing the Strimzi schemas (npm ci)"
  rm -rf "$dest/strimzi" && mkdir -p "$dest/strimzi"
  cp "$here/package.json" "$here/package-lock.json" "$here/check-strimzi.mjs" "$dest/strimzi/"
  (cd "$dest/strimzi" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "k8s-tools: $("$dest/bin/kustomize" version), strimzi schemas in $dest/strimzi"
