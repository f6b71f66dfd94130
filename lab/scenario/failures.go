package scenario

import (
	"fmt"
	"slices"

	"github.com/danki-dev/danki/lab/traffic"
)

// UserFailures splits the users' failed requests by where they fell: in
// a measured phase (before, during or after a rollout: the tables count
// them), while the lab reinstalled the app between scenarios (its pods
// deleted, none serving: the lab's doing, no rollout's), or elsewhere (the
// unmeasured settling between scenarios: any there is worth a look).
type UserFailures struct {
	Measured   int `json:"measured"`
	Reinstalls int `json:"reinstalls"`
	Elsewhere  int `json:"elsewhere"`
}

// String is the split, for the report's users line.
func (f UserFailures) String() string {
	return fmt.Sprintf("%d in the measured phases, %d while the lab reinstalled the app between scenarios (no pod serving), %d elsewhere",
		f.Measured, f.Reinstalls, f.Elsewhere)
}

// userFailuresOf splits the failed samples between the measured phases
// (each scenario's), the reinstalls, and the rest.
func userFailuresOf(samples []traffic.Sample, measured [][]traffic.Phase, reinstalls []traffic.Phase) *UserFailures {
	inMeasured := slices.Concat(measured...)
	in := func(ps []traffic.Phase, s traffic.Sample) bool {
		return slices.ContainsFunc(ps, func(p traffic.Phase) bool { return p.Contains(s.Start) })
	}
	f := &UserFailures{}
	for _, s := range samples {
		switch {
		case s.OK():
		case in(inMeasured, s):
			f.Measured++
		case in(reinstalls, s):
			f.Reinstalls++
		default:
			f.Elsewhere++
		}
	}
	return f
}

// reinstallsOf are the reinstalls of app's Rollout.
func (l *lab) reinstallsOf(app target) []traffic.Phase {
	var out []traffic.Phase
	for _, r := range l.reinstalls {
		if r.Name == app.rollout {
			out = append(out, r)
		}
	}
	return out
}
