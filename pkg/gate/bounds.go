package gate

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/metrics"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// What one tenant's pod may make the gate do is bounded, since every
// tenant's pods share it (docs/gate.md, "Blast radius"): the time a
// reconcile takes, the time a warm-up slot waits for a pod's health, and
// which addresses are warmed.

// reconcileTimeout bounds one reconcile: the controller has a few
// workers (manager.go), and a reconcile that waited on the API server
// without end would take one from every other pod's. A warm-up runs in the
// background and is bounded by its deadline.
const reconcileTimeout = 30 * time.Second

// apiCallTimeout bounds each of the gate's own API calls made from a
// warm-up's goroutine (its condition, its CPU request), whose context ends
// only with the warm-up: a call hung on the API server would hold the
// warm-up's slot with it.
const apiCallTimeout = 15 * time.Second

// ParseTimeout bounds parsing and validating one annotation (ParseConfig:
// the decode, the caps and one rendering of every request template) in a
// reconcile. A parse takes microseconds; one that takes seconds is a
// tenant's template built to run on (a nested range), and waiting for it
// would hold the reconcile's worker.
const ParseTimeout = 5 * time.Second

// errParseTooLong: the annotation's parse did not end within ParseTimeout.
var errParseTooLong = errors.New("took too long")

// maxSlowParses is how many annotations whose parse ran past the bound
// are remembered as refused (their parse running or ended).
const maxSlowParses = 1024

// parsing is one annotation's parse in flight or, when it ran past the
// bound, remembered.
type parsing struct {
	done chan struct{}
	cfg  Config
	err  error
	slow bool // guarded by Reconciler.parseMu
}

// parseConfig is ParseConfig of annotation under the Reconciler's policy,
// waiting at most ParseTimeout (or until ctx ends). A parse that runs past
// the bound refuses the annotation (errParseTooLong: the pod's condition
// InvalidConfig), for good: its templates would take as long on every
// request. It is not stopped — Go cannot stop it — but the reconcile goes
// on without it, and an annotation whose parse ran past the bound is parsed
// once however many pods (one template's) carry it: their reconciles read
// the same refusal.
func (r *Reconciler) parseConfig(ctx context.Context, annotation string) (Config, error) {
	key := sha256.Sum256([]byte(annotation))
	r.parseMu.Lock()
	p := r.parses[key]
	if p == nil {
		p = &parsing{done: make(chan struct{})}
		r.parses[key] = p
		go func() {
			cfg, err := parseRecovering(annotation, r)
			r.parseMu.Lock()
			p.cfg, p.err = cfg, err
			if !p.slow {
				delete(r.parses, key) // in time: nothing to remember
			}
			r.parseMu.Unlock()
			close(p.done)
		}()
	}
	slow := p.slow
	r.parseMu.Unlock()
	if !slow {
		wait := time.NewTimer(r.parseTimeout())
		defer wait.Stop()
		select {
		case <-p.done:
			r.parseMu.Lock()
			slow = p.slow // another reconcile's wait ran out first
			r.parseMu.Unlock()
			if !slow {
				return p.cfg, p.err
			}
		case <-wait.C:
		case <-ctx.Done():
		}
		r.parseMu.Lock()
		if !p.slow {
			select {
			case <-p.done: // ended as the wait ran out: in time after all
				r.parseMu.Unlock()
				return p.cfg, p.err
			default:
			}
			p.slow = true
			r.forgetSlowParsesLocked()
		}
		r.parseMu.Unlock()
	}
	return Config{}, fmt.Errorf("annotation %s: %w: its config was not parsed and validated within %s (a request template that renders without end?); refused, the pod stays un-ready",
		wellknown.WarmUpAnnotation, errParseTooLong, r.parseTimeout())
}

// parseRecovering is ParseConfig with a panic made an error: it runs in a
// goroutine of its own, where controller-runtime's recovery of a
// reconcile's panic does not reach.
func parseRecovering(annotation string, r *Reconciler) (cfg Config, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("annotation %s: parse failed: %v", wellknown.WarmUpAnnotation, p)
		}
	}()
	if r.testParse != nil {
		return r.testParse(annotation)
	}
	return ParseConfig(annotation, r.Policy)
}

func (r *Reconciler) parseTimeout() time.Duration {
	if r.testParseTimeout > 0 {
		return r.testParseTimeout
	}
	return ParseTimeout
}

// forgetSlowParsesLocked keeps r.parses within maxSlowParses by dropping
// slow parses that have ended (their pods parse again, within the bound
// or not). Parses still running stay: forgetting them would start them
// again. Caller holds r.parseMu.
func (r *Reconciler) forgetSlowParsesLocked() {
	if len(r.parses) <= maxSlowParses {
		return
	}
	for k, p := range r.parses {
		select {
		case <-p.done:
			delete(r.parses, k)
		default:
		}
		if len(r.parses) <= maxSlowParses {
			return
		}
	}
}

// DefaultMaxHealthWait bounds how long a warm-up waits for its pod's
// health check while it holds a warm-up slot (and its node's): a pod that
// never answers — whosever it is — gives its slot to the next in line
// after it, its attempt failed (retried after the back-off, counted
// against its retries). A pod's containers are ready before the gate warms
// it, so its health path usually answers at once; a tenant's healthTimeout
// may narrow the wait, never widen it (--max-health-wait).
const DefaultMaxHealthWait = 2 * time.Minute

// withinHealthWait is c with its healthTimeout no longer than the gate's
// MaxHealthWait, and that bound when it narrowed the pod's (0: it did
// not).
func (r *Reconciler) withinHealthWait(c warmup.Config) (warmup.Config, time.Duration) {
	limit := r.MaxHealthWait
	if limit == 0 {
		limit = DefaultMaxHealthWait
	}
	if limit < 0 || c.HealthTimeout.D() <= limit {
		return c, 0
	}
	c.HealthTimeout = config.Duration(limit)
	return c, limit
}

// ReasonHostNetwork is the condition's reason on a pod the gate refuses
// to warm because it uses its node's network.
const ReasonHostNetwork = "HostNetworkRefused"

// refuseHostNetwork marks a host-network pod as not warmed: its address
// is its node's, so warm-up load would go to the node and to whatever else
// listens there (the kubelet, node agents), not to one pod. The pod stays
// un-Ready — the gate never makes a pod Ready it has not warmed, and the
// pod's author asked for the gate — with the reason in its condition and a
// Warning Event; taking the annotation off (a new pod) or running it
// without hostNetwork lets it be Ready.
func (r *Reconciler) refuseHostNetwork(ctx context.Context, pod *corev1.Pod) error {
	const msg = "not warmed: the pod uses its node's network (spec.hostNetwork), so its address is the node's and warm-up load would hit the node and everything listening on it; it stays un-ready (remove " + wellknown.WarmUpAnnotation + " or hostNetwork)"
	if c := condition(pod); c == nil || c.Reason != ReasonHostNetwork {
		r.Events.Eventf(pod, nil, corev1.EventTypeWarning, ReasonHostNetwork, eventAction, "%s", msg)
		r.Metrics.WarmupEnded(metrics.OutcomeRejected, 0, 0)
	}
	return r.setCondition(ctx, pod, corev1.ConditionFalse, ReasonHostNetwork, msg)
}
