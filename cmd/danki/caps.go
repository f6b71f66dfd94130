package main

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/danki-dev/danki/pkg/policy"
)

// capFlags are the command line's own caps on the load (policy.Limits).
// The plugins and the gate take theirs from the operator (--max-qps, …,
// on `danki plugin` and `danki gate`); on the command line its user is the
// operator, and the caps only catch typos (--connections 5000), so each
// command that sends load lets its user raise them. They are named
// --cap-* because --max-requests, --max-qps and --deadline already mean
// the run's own budget on these commands.
type capFlags struct{ limits policy.Limits }

// addFlags registers the --cap-* flags.
func (c *capFlags) addFlags(fs *pflag.FlagSet) {
	d := policy.DefaultLimits
	fs.Float64Var(&c.limits.QPS, "cap-qps", d.QPS, "the command line's cap on requests per second per target (a guard against typos; raise it to send more)")
	fs.IntVar(&c.limits.Connections, "cap-connections", d.Connections, "the command line's cap on concurrent connections per target")
	fs.Int64Var(&c.limits.Requests, "cap-requests", d.Requests, "the command line's cap on requests per target")
	fs.DurationVar(&c.limits.Deadline, "cap-deadline", d.Deadline, "the command line's cap on a warm-up's or load test's deadline")
	fs.DurationVar(&c.limits.HealthTimeout, "cap-health-timeout", d.HealthTimeout, "the command line's cap on the health timeout")
	fs.DurationVar(&c.limits.Timeout, "cap-timeout", d.Timeout, "the command line's cap on one request's timeout")
}

// local is the command line's policy (policy.Local) with these caps.
func (c *capFlags) local() policy.Policy {
	p := policy.Local()
	p.Limits = c.limits
	return p
}

// capFlagNames are the --cap-* flags of capFlags, by the operator flag
// (of `danki plugin` and `danki gate`) a cap error names.
var capFlagNames = map[string]string{
	"--max-qps":            "--cap-qps",
	"--max-connections":    "--cap-connections",
	"--max-requests":       "--cap-requests",
	"--max-deadline":       "--cap-deadline",
	"--max-health-timeout": "--cap-health-timeout",
	"--max-timeout":        "--cap-timeout",
}

// operatorCap is how a cap error (policy.Over) ends: it names the
// operator's flag, which the command line's commands do not have (or have
// with another meaning: danki warmup's --max-requests is its budget).
var operatorCap = regexp.MustCompile(`is above the operator's cap of ([^;]+); lower it \(the operator sets the cap with (--max-[a-z-]+), docs/security\.md\)`)

// explainCaps rewrites the cap errors in err for cmd's user: the cap is
// the command line's, raised with cmd's own --cap-* flag (or, where cmd
// has none, fixed). A verdict passes unchanged.
func explainCaps(cmd *cobra.Command, err error) error {
	var v *verdictError
	if err == nil || errors.As(err, &v) || !operatorCap.MatchString(err.Error()) {
		return err
	}
	msg := operatorCap.ReplaceAllStringFunc(err.Error(), func(m string) string {
		sub := operatorCap.FindStringSubmatch(m)
		if name := capFlagNames[sub[2]]; name != "" && cmd.Flags().Lookup(name[2:]) != nil {
			return fmt.Sprintf("is above the command line's cap of %s (a guard against typos); lower it, or raise the cap with %s", sub[1], name)
		}
		return fmt.Sprintf("is above the command line's cap of %s; lower it (docs/security.md)", sub[1])
	})
	return errors.New(msg)
}

// withCaps registers the --cap-* flags on cmd and names them in the cap
// errors its RunE returns.
func withCaps(cmd *cobra.Command, c *capFlags) *cobra.Command {
	c.addFlags(cmd.Flags())
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return explainCaps(cmd, run(cmd, args))
	}
	return cmd
}
