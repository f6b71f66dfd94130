# danki — see README.md. `make demo` runs the main job, `make test` the tests.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

# go.mod asks for go 1.26.10 (argo-rollouts v1.10.2 does); let the go command
# fetch that toolchain from the module proxy when the installed one is older.
export GOTOOLCHAIN ?= auto
export GOFLAGS ?= -buildvcs=false

DANKI_CACHE ?= $(CURDIR)/.cache
export DANKI_CACHE
TOOLS := $(DANKI_CACHE)/tools/bin
STATICCHECK_VERSION := v0.8.2
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
# Integration tests start API servers, Prometheus and the lab: give them room
# on a 2-core machine.
TEST_TIMEOUT ?= 40m

.PHONY: all build test unit lint demo bench lab-bins lab-up lab-down clean help

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

build: ## build bin/danki (CLI and Argo Rollouts plugin in one binary)
	go build -trimpath -ldflags '$(LDFLAGS)' -o bin/danki ./cmd/danki

test: lint lab-bins ## lint, build the lab's control plane, run every test (unit + real API server)
	go test -count=1 -timeout $(TEST_TIMEOUT) ./...

unit: ## unit tests only (no API server, no lab)
	go test -short -count=1 ./...

lint: $(TOOLS)/staticcheck ## go vet, gofmt, staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(TOOLS)/staticcheck ./...

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

bench: ## Go benchmarks (speed and memory targets live here, not in tests)
	go test -run '^$$' -bench . -benchmem -count=1 ./...

demo: ## the whole story: baseline vs danki rollout in the lab
	@echo "make demo: not yet — the side-by-side rollout demo lands with the demo issue (#7)."
	@echo "What runs today: 'make lab-up' (the whole lab; see README.md), the danki CLI and 'make test'."

lab-bins: ## build the lab's binaries into $(DANKI_CACHE)/lab/bin (cached; ~25 min cold on an idle 2-core machine)
	test/lab/build.sh

lab-up: ## start the lab (control plane, pod network, istiod + Envoy, Prometheus, Argo Rollouts); kubeconfig at $(DANKI_CACHE)/lab/kubeconfig
	test/lab/up.sh

lab-down: ## stop what lab-up started
	test/lab/down.sh

clean: ## remove build outputs (keeps the lab cache; rm -rf .cache for that)
	rm -rf bin
