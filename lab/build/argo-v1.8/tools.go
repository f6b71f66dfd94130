//go:build tools

// Package tools pins the command this wrapper module builds, so that
// `go build -mod=mod` records its dependencies in go.mod.
package tools

import _ "github.com/argoproj/argo-rollouts/cmd/rollouts-controller"
