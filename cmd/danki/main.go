// Command danki makes canary rollouts of JVM services on Istio warm-up-aware
// and tail-latency-gated. The same binary is the Argo Rollouts plugin for all
// three plugin kinds (`danki plugin`) and a CLI for doing the same by hand.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// One signal-cancelled context for every command: Ctrl-C or SIGTERM
	// stops load and ramps cleanly instead of killing them mid-request.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	// cobra printed "Error: …" for an error; a verdict printed itself.
	os.Exit(exitCode(err))
}
