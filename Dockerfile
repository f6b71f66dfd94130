# The Argo Rollouts controller image with danki inside, for clusters that
# register danki with `location: file:///home/argo-rollouts/danki` (deploy/):
#
#   docker build -t danki.dev/argo-rollouts-danki:dev .
#   docker build --build-arg VERSION=v0.1.0 -t registry.example.com/argo-rollouts-danki:v0.1.0 .
#
# Then run it as the controller's image (kubectl -n argo-rollouts set image
# deployment/argo-rollouts argo-rollouts=<image>); examples/kind/up.sh does.
# The danki binary is the same static build as `make build` / `make release`.

# go.mod asks for go 1.26.10 (argo-rollouts v1.10.2 does).
ARG GO_VERSION=1.26.10

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=auto
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH:-amd64} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/danki ./cmd/danki

FROM quay.io/argoproj/argo-rollouts:v1.10.2
# The base image runs as uid 999 with WORKDIR /home/argo-rollouts; the binary
# is root-owned, mode 0755 (go build's), so the controller can read and run
# it but not change it.
COPY --from=build /out/danki /home/argo-rollouts/danki
