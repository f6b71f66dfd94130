#!/usr/bin/env bash
# Runs helm, built from the Go module proxy into $DANKI_CACHE/tools/bin (like
# staticcheck; ~2.5 min cold on 2 cores, then cached). The pin is here.
#
#   hack/helm.sh --path           # build if needed, print the binary's path
#   hack/helm.sh lint deploy/helm/danki
#   hack/helm.sh check            # make test's static check of deploy/helm/danki: lint, template,
#                                 # bad values refused, promtool on the alerts (if installed)
#   hack/helm.sh rules FILE       # the chart's alerts (its PrometheusRule's spec) as a Prometheus
#                                 # rule file: what the lab's Prometheus loads
set -euo pipefail

HELM_VERSION=v3.22.0

repo=$(cd "$(dirname "$0")/.." && pwd)
tools=$("$repo/hack/cache-dir.sh")/tools/bin
helm=$tools/helm
stamp=$tools/helm.version
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=-buildvcs=false

if [ ! -x "$helm" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$HELM_VERSION" ]; then
	echo "hack/helm.sh: building helm $HELM_VERSION into $tools (~2.5 min cold)" >&2
	mkdir -p "$tools"
	GOBIN=$tools go install -trimpath \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
		"helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
	echo "$HELM_VERSION" >"$stamp"
fi

chart=$repo/deploy/helm/danki
render=("$helm" template danki "$chart" --namespace danki-gate --kube-version 1.34.4)

# rules_file: the PrometheusRule's spec (templates/prometheus-rule.yaml, the
# gate's and the plugins' alerts) is a Prometheus rule file.
rules_file() {
	"${render[@]}" --set monitoring.prometheusRule.enabled=true --show-only templates/prometheus-rule.yaml |
		sed -n '/^spec:$/,$p' | tail -n +2 | sed 's/^  //'
}

case ${1:-} in
--path) echo "$helm" ;;
rules)
	[ -n "${2:-}" ] || { echo "hack/helm.sh rules FILE: give the file to write" >&2; exit 2; }
	out=$(rules_file)
	[ -n "$out" ] || { echo "hack/helm.sh rules: the chart rendered no PrometheusRule" >&2; exit 1; }
	printf '%s\n' "$out" >"$2"
	;;
check)
	# every toggle of values.yaml's monitoring on
	monitoring=(--set monitoring.prometheusRule.enabled=true --set monitoring.gate.podMonitor=true
		--set monitoring.gate.serviceMonitor=true --set monitoring.plugins.podMonitor=true)
	"$helm" lint --strict "$chart"
	"$helm" lint --strict "$chart" --set certificates.certManager.enabled=true
	"$helm" lint --strict "$chart" "${monitoring[@]}"
	# Render both certificate modes; the API server checks the output in
	# test/manifests (TestHelmChart).
	# (--kube-version: the lab's API server; helm's own default is 1.20.)
	"${render[@]}" >/dev/null
	"${render[@]}" --set certificates.certManager.enabled=true >/dev/null
	"${render[@]}" "${monitoring[@]}" >/dev/null

	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	# values.schema.json refuses a wrong type and an unknown key (a typo
	# would otherwise be ignored and the default used).
	printf 'gate:\n  replicas: "2"\n' >"$tmp/wrong-type.yaml"
	printf 'gate:\n  replica: 2\n' >"$tmp/unknown-key.yaml"
	printf 'monitoring:\n  prometheusRule:\n    queuedFor: soon\n' >"$tmp/bad-duration.yaml"
	for bad in wrong-type unknown-key bad-duration; do
		if "${render[@]}" -f "$tmp/$bad.yaml" >/dev/null 2>"$tmp/$bad.err"; then
			echo "hack/helm.sh: $chart accepted the bad values $bad.yaml:" >&2
			cat "$tmp/$bad.yaml" >&2
			exit 1
		fi
		grep -q "values don't meet the specifications of the schema" "$tmp/$bad.err" || {
			echo "hack/helm.sh: $bad.yaml refused, but not by values.schema.json:" >&2
			cat "$tmp/$bad.err" >&2
			exit 1
		}
	done

	# The alerts (templates/prometheus-rule.yaml): the PrometheusRule's spec
	# is a Prometheus rule file; promtool checks it and runs its unit tests.
	if command -v promtool >/dev/null; then
		rules_file >"$tmp/rules.yaml"
		cp "$repo/deploy/helm/alerts-test.yaml" "$tmp/"
		promtool check rules "$tmp/rules.yaml"
		promtool test rules "$tmp/alerts-test.yaml"
		rules="alert rules pass promtool check and test"
	else
		rules="alert rules NOT checked: no promtool (Debian: apt-get install prometheus)"
	fi
	echo "hack/helm.sh: $chart lints and renders (self-managed and cert-manager certificates, monitoring on), refuses bad values; $rules" >&2
	;;
*) exec "$helm" "$@" ;;
esac
