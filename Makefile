# danki — see README.md. `make demo` runs the main job, `make test` the tests;
# the lab's targets: lab/README.md.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

# go.mod asks for go 1.26.10 (argo-rollouts v1.10.2 does); let the go command
# fetch that toolchain from the module proxy when the installed one is older.
export GOTOOLCHAIN ?= auto
export GOFLAGS ?= -buildvcs=false

# hack/cache-dir.sh: .cache, a link to one cache per machine outside the
# clone (fresh clones reuse the lab built once), unless it exists or is set.
DANKI_CACHE ?= $(shell hack/cache-dir.sh)
export DANKI_CACHE
TOOLS := $(DANKI_CACHE)/tools/bin
STATICCHECK_VERSION := v0.8.2
# The nearest v* tag (git describe); v0.0.0-dev.<commit> without one.
VERSION ?= $(shell hack/version.sh)
LDFLAGS := -s -w -X main.version=$(VERSION)
# Integration tests start API servers, Prometheus and the lab: give them room
# on a 2-core machine.
TEST_TIMEOUT ?= 60m

.PHONY: all build build-lab release chart test compat fuzz unit lint demo bench aa lab-bins lab-up lab-down clean help

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

build: ## build bin/danki (CLI and Argo Rollouts plugin in one binary; what a release ships)
	go build -trimpath -ldflags '$(LDFLAGS)' -o bin/danki ./cmd/danki

# The lab's own binary (pod runner, demo, plots), kept out of danki; the lab
# scripts build it into $(DANKI_CACHE)/lab/bin themselves.
build-lab: ## build bin/danki-lab (the lab runner and demo; not released)
	go build -trimpath -ldflags '-s -w' -o bin/danki-lab ./lab/cmd/danki-lab

# Argo Rollouts downloads a plugin by URL and checks its sha256: release the
# bare binaries (not in tarballs) and their sums, beside the image archives
# (dist/images/; hack/release.sh; test/release).
release: ## cross-build dist/danki-{linux,darwin}-{amd64,arm64} + dist/checksums.txt + dist/argo-rollouts-config.yaml (deploy/http filled in) + dist/argo-rollouts-values.yaml + dist/images/ (image archives)
	VERSION=$(VERSION) hack/release.sh dist

# The lab's end-to-end tests run after the rest, alone: rollouts of real JVMs
# judged by their latency should not share two cores with compilers and
# other packages' API servers.
#
# The packages whose tests judge real load by its latency and achieved rate
# (LOAD_PACKAGES) run one after the other, not beside another package: on two
# cores a neighbour's CPU starves their load generator, which under-delivers
# and reads as a lower knee or a slower pod (CI failed so in
# TestKneeOfKnownCapacities and TestConvergesOnDecayingLatency, a fresh
# clone in TestSupervisorResumesAfterRestart).
LOAD_PACKAGES := github.com/danki-dev/danki/pkg/capacity github.com/danki-dev/danki/pkg/warmup github.com/danki-dev/danki/pkg/warmupstep
# The unit phase's longest packages (~3–5 min each), named first so they start
# first: last in go list's order, rollouts alone was the phase's last 3 minutes.
UNIT_FIRST := github.com/danki-dev/danki/lab/coldstart github.com/danki-dev/danki/rollouts github.com/danki-dev/danki/pkg/gate
test: lint chart lab-bins ## lint, lint and render the Helm chart, build the lab, run every test: unit, real API server, fuzzing of the tenant-facing decoders (FUZZTIME each), then the lab end to end (root)
	go test -count=1 -timeout $(TEST_TIMEOUT) $(UNIT_FIRST) $$(go list ./... | grep -v /test/e2e | grep -vxF $(foreach p,$(LOAD_PACKAGES) $(UNIT_FIRST),-e $(p)))
	go test -count=1 -timeout $(TEST_TIMEOUT) -p 1 $(LOAD_PACKAGES)
	hack/fuzz.sh
	go test -count=1 -timeout $(TEST_TIMEOUT) -v ./test/e2e/ 2>&1 | grep --line-buffered -vE '^\s+lab_test.go:[0-9]+: \[lab' ; exit $${PIPESTATUS[0]}

# Not part of `make test`: it builds a second Argo Rollouts controller (~7 min
# cold) and runs the lab end to end against it. docs/install.md,
# "Compatibility", lists what each row of the matrix ran.
compat: ## (root) the oldest Argo Rollouts controller danki supports (v1.8.5, built beside v1.10.2) in the lab: the end-to-end tests that drive step, traffic router and metric plugin through it; compat-results/compat.md (versions, date, pass/fail)
	lab/scripts/compat.sh

chart: ## helm lint + helm template of deploy/helm/danki (helm built into $(TOOLS), cached)
	hack/helm.sh check

fuzz: ## fuzz every tenant-facing decoder (Fuzz* targets) for FUZZTIME each (default 20000x inputs)
	hack/fuzz.sh

unit: ## unit tests only (no API server, no lab)
	go test -short -count=1 ./...

lint: $(TOOLS)/staticcheck ## gofmt, go vet, staticcheck, shellcheck
	@unformatted=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(TOOLS)/staticcheck ./...
	hack/shellcheck.sh

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

bench: ## Go benchmarks, then (root) the lab bench: baseline, Istio slow start, a fixed 100-request warm-up, danki warming on mirrored traffic and danki side by side (warm-up lengths, ratios ÷ danki) + oracle warm-up length, danki ÷ a control with no warm-up (users on stable), Spring Boot with a fixed 100-request warm-up vs danki, the gate bench, the BlueGreen load test, the capacity knees; in bench-results/, then rewrites lab/RESULTS.md
	lab/scripts/bench.sh

demo: ## the main job (root): baseline vs danki rollout of a cold-starting JVM app under user traffic, then the warm gate's short bench; tables + charts in demo-results/ (lab/README.md)
	lab/scripts/demo.sh

aa: ## (root) issue #14's lab A/A: the same version rolled out AA_RUNS times (default 20) with danki's defaults — is a good version ever rejected? aa-results/
	lab/scripts/up.sh && { $(DANKI_CACHE)/lab/bin/danki-lab aa --root . --kubeconfig $(DANKI_CACHE)/lab/kubeconfig --runs $${AA_RUNS:-20} --out aa-results; rc=$$?; lab/scripts/down.sh; exit $$rc; }

lab-bins: ## build the lab's other binaries (control plane, istiod, Argo, Envoy, Prometheus, sample apps HTTP, gRPC and Spring Boot) into $(DANKI_CACHE)/lab/bin (cached; ~25 min cold on an idle 2-core machine)
	lab/scripts/build.sh

lab-up: ## build danki + danki-lab, start the lab (control plane, pod network, istiod + Envoy, Prometheus, Argo Rollouts); kubeconfig at $(DANKI_CACHE)/lab/kubeconfig
	lab/scripts/up.sh

lab-down: ## stop what lab-up started (the controller's plugin processes too); fails if anything is left running
	lab/scripts/down.sh

clean: ## remove build outputs (keeps the lab cache: .cache, by default a link to ~/.cache/danki; remove its target for that)
	rm -rf bin dist demo-results bench-results
