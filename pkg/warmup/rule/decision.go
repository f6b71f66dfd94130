package rule

// Kind is what the rule decided about a pod.
type Kind int

const (
	// KeepLoading: not warm yet; the load goes on.
	KeepLoading Kind = iota
	// Warm: its latency has converged (as fast as stable, settled near
	// it for long enough, or flat on its own plateau).
	Warm
	// AcceptedNearStable: a bound ended its warm-up before it converged,
	// but its latency is near enough stable's for users
	// (acceptNearStable).
	AcceptedNearStable
	// RejectedSlower: settled far above stable for long enough: a slower
	// version (rejectSlowerVersion).
	RejectedSlower
	// Failed: a bound ended its warm-up before it converged, and it is
	// not near stable.
	Failed
)

func (k Kind) String() string {
	switch k {
	case KeepLoading:
		return "keep loading"
	case Warm:
		return "warm"
	case AcceptedNearStable:
		return "accepted near stable"
	case RejectedSlower:
		return "rejected as a slower version"
	case Failed:
		return "not warm at the bound"
	}
	return "unknown decision"
}

// Decision is the rule's answer after a pod's window (Pod.Window) or at a
// bound (Pod.AtBound).
type Decision struct {
	Kind Kind
	// Reason says why: what the pod still lacks (KeepLoading, Failed),
	// the rule that called it warm with its thresholds and figures (Warm:
	// "as fast as stable: …", "settled near stable: …", "on its own
	// plateau: …", and the JIT's part where it was read), how near stable
	// it is (AcceptedNearStable), how much slower (RejectedSlower).
	Reason string
	// Settled is, for a pod warm short of stable's latency (settled near
	// stable), where it settled; "" otherwise.
	Settled string
	// Look is what the latest look at its latency said, whatever the
	// decision: the warm-up's progress shows it.
	Look string
}

// Final says whether the decision ends the pod's warm-up one way or the
// other (a rejection the caller may still defer: a pod yielding its CPU).
func (d Decision) Final() bool { return d.Kind != KeepLoading }

func (d Decision) String() string {
	if d.Reason == "" {
		return d.Kind.String()
	}
	return d.Kind.String() + ": " + d.Reason
}

// decisionOf is the decision a check of the pod's windows makes.
func decisionOf(ch check) Decision {
	d := Decision{Kind: KeepLoading, Reason: ch.why, Look: ch.why}
	switch {
	case ch.rejected != "":
		d.Kind, d.Reason = RejectedSlower, ch.rejected
	case ch.converged:
		d.Kind, d.Reason, d.Settled = Warm, ch.by, ch.settled
	}
	return d
}
