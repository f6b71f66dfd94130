package warmupstep

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/warmup"
)

// Phase is a supervised run's phase (Status.Phase): the warm-up's own
// (warmup.Phase: health, load) and the supervisor's around it. It is
// stored as its string in the status Argo keeps.
type Phase string

// Phases of a supervised run.
const (
	PhaseHealth          = Phase(warmup.PhaseHealth) // waiting for targets to answer the health check
	PhaseLoad            = Phase(warmup.PhaseLoad)   // sending warm-up load (or mirroring, Job.Main)
	PhaseResolving Phase = "resolving"               // finding the targets
	PhaseChecking  Phase = "checking"                // converged; Job.After runs (e.g. the capacity check)
	PhaseConverged Phase = "converged"               // every target converged
	PhaseFailed    Phase = "failed"                  // did not converge, or could not start
	PhaseStopped   Phase = "stopped"                 // stopped by the caller
)

// Final reports whether a run in this phase has ended.
func (p Phase) Final() bool {
	return p == PhaseConverged || p == PhaseFailed || p == PhaseStopped
}

// Status is a supervised warm-up's progress. The step plugin persists it as
// JSON in rollout.status.canary.stepPluginStatuses[].status; the controller
// hands it back on the next call, also to a restarted plugin process.
type Status struct {
	// RunID identifies the run: RunKey.String().
	RunID      string    `json:"runID"`
	CanaryHash string    `json:"canaryHash,omitempty"`
	Step       int32     `json:"step"`
	StartedAt  time.Time `json:"startedAt"`
	// Restarts counts runs started again after their process restarted.
	Restarts  int           `json:"restarts,omitempty"`
	Phase     Phase         `json:"phase"`
	Pods      []PodProgress `json:"pods,omitempty"`
	Converged int           `json:"converged"`
	Requests  int64         `json:"requests"`
	Windows   int           `json:"windows"`
	FirstP99  string        `json:"firstP99,omitempty"`
	LastP99   string        `json:"lastP99,omitempty"`
	StableP99 string        `json:"stableP99,omitempty"`
	// Trend is the p99 of the last six windows (of any pod), oldest first.
	Trend []string `json:"p99Trend,omitempty"`
	// PaceQPS is the latest pace of a pod's warm-up (the ramp, see
	// Config.StartQPS), in requests per second.
	PaceQPS float64 `json:"paceQPS,omitempty"`
	// Backoffs counts the neighbour guard's back-offs; Neighbours is its
	// latest action (Config.NeighbourGuard).
	Backoffs   int    `json:"backoffs,omitempty"`
	Neighbours string `json:"neighbours,omitempty"`
	Message    string `json:"message,omitempty"`
}

// guardNote introduces the neighbour guard's latest action in
// Status.Message while it caps the pace.
const guardNote = "; neighbour guard: "

// PodProgress is one target's latest window.
type PodProgress struct {
	Name      string `json:"name"`
	Windows   int    `json:"windows"`
	LastP99   string `json:"lastP99,omitempty"`
	Converged bool   `json:"converged,omitempty"`
}

// ParseStatus reads a Status kept by the caller; nil when raw is empty or
// is not a warm-up status (the caller then has no earlier run).
func ParseStatus(raw []byte) *Status {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var st Status
	if err := json.Unmarshal(raw, &st); err != nil || st.RunID == "" {
		return nil
	}
	return &st
}

// trendLength is how many window p99s Status.Trend keeps.
const trendLength = 6

// fold adds a progress snapshot to the status; pods holds every target's
// latest progress.
func (st *Status) fold(p warmup.Progress, pods map[string]*PodProgress) {
	st.Phase = Phase(p.Phase)
	if p.Target == "" {
		if p.Phase == warmup.PhaseLoad {
			st.Message = fmt.Sprintf("warming %d pod(s)", p.Targets)
		}
		return
	}
	if p.StableP99 > 0 {
		st.StableP99 = p.StableP99.String()
	}
	if p.Neighbours != "" {
		st.Neighbours, st.Backoffs = p.Neighbours, p.Backoffs
		if i := strings.Index(st.Message, guardNote); i >= 0 {
			st.Message = st.Message[:i]
		}
		st.Message += guardNote + p.Neighbours
	}
	if p.Stable {
		return
	}
	st.PaceQPS = p.Pace
	st.Requests, st.Converged = p.Requests, p.ConvergedTargets
	pod := pods[p.Target]
	if pod == nil {
		pod = &PodProgress{Name: p.Target}
		pods[p.Target] = pod
	}
	pod.Windows, pod.LastP99, pod.Converged = p.Window.Index, p.Window.P99.String(), p.TargetConverged
	st.Windows = max(st.Windows, p.Window.Index)
	if p.Window.Index == 1 {
		if d, _ := time.ParseDuration(st.FirstP99); p.Window.P99 > d {
			st.FirstP99 = p.Window.P99.String()
		}
	}
	st.LastP99 = p.Window.P99.String()
	st.Trend = append(st.Trend, p.Window.P99.Round(10*time.Microsecond).String())
	if len(st.Trend) > trendLength {
		st.Trend = st.Trend[len(st.Trend)-trendLength:]
	}
	st.Pods = st.Pods[:0]
	for _, pp := range pods {
		st.Pods = append(st.Pods, *pp)
	}
	slices.SortFunc(st.Pods, func(a, b PodProgress) int { return strings.Compare(a.Name, b.Name) })
	st.Message = fmt.Sprintf("warming %d pod(s): %d requests, %d/%d converged; p99 %s (window 1) → %s (window %d, %s)",
		p.Targets, p.Requests, p.ConvergedTargets, p.Targets, st.FirstP99, st.LastP99, p.Window.Index, p.Target)
	if !p.TargetConverged && p.Waiting != "" {
		st.Message += ", waiting for: " + p.Waiting
	} else if p.TargetConverged && p.Warm != "" {
		st.Message += ", " + p.Target + " warm " + p.Warm
	}
	if p.PaceCap > 0 && st.Neighbours != "" {
		st.Message += guardNote + st.Neighbours
	}
}
