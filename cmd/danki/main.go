// Command danki makes canary rollouts of JVM services on Istio warm-up-aware
// and tail-latency-gated. The same binary is the Argo Rollouts plugin for all
// three plugin kinds (`danki plugin`) and a CLI for doing the same by hand.
package main

import (
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		os.Exit(1)
	}
}
