package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// The exit codes of every command: a verdict on the version (1, 2) is not
// an error (3), so scripts and CI can tell "the canary is bad" from "danki
// could not tell".
const (
	exitOK = 0
	// exitVerdict: the version was judged and did not pass (analyze: Fail;
	// warmup: not warm; capacity: the knee below --min-qps).
	exitVerdict = 1
	// exitInconclusive: analyze had too little data to judge (never a pass).
	exitInconclusive = 2
	// exitError: danki could not run or measure (bad flags or config,
	// Prometheus or the pods unreachable, interrupted): "Error: …" on stderr.
	exitError = 3
)

// verdictError ends a command with an outcome rather than a failure to
// run: main exits with code, and cobra prints neither "Error:" nor usage.
type verdictError struct {
	code int
	err  error
}

func (e *verdictError) Error() string { return e.err.Error() }
func (e *verdictError) Unwrap() error { return e.err }

// verdict returns err as cmd's verdict with exit code code. The command has
// printed the verdict on stdout; show also prints err on stderr (without
// "Error:"), for what the output does not say.
func verdict(cmd *cobra.Command, code int, err error, show bool) error {
	cmd.SilenceErrors = true
	if show {
		fmt.Fprintln(cmd.ErrOrStderr(), err)
	}
	return &verdictError{code: code, err: err}
}

// exitCode is the process's exit code for a command's error.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var v *verdictError
	if errors.As(err, &v) {
		return v.code
	}
	return exitError
}
