package capacity

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/danki-dev/danki/pkg/wellknown"
)

// historyLimit bounds the annotation: the stable revision's knee is the
// one compared with; a few more survive an aborted rollout or two.
const historyLimit = 5

// Knee is one revision's measured knee.
type Knee struct {
	// Revision is the pod-template hash the knee was measured on.
	Revision string `json:"revision"`
	// QPS is the knee; Capped says the ramp reached maxQPS without breaking
	// (the real knee is at least QPS).
	QPS    float64   `json:"qps"`
	Capped bool      `json:"capped,omitempty"`
	At     time.Time `json:"at"`
}

// History is the knees recorded on a Rollout, oldest first.
type History []Knee

// ParseHistory reads the annotation's value ("" is an empty history).
func ParseHistory(raw string) (History, error) {
	var h History
	if raw == "" {
		return h, nil
	}
	if err := json.Unmarshal([]byte(raw), &h); err != nil {
		return nil, fmt.Errorf("annotation %s: not a JSON list of knees (remove it to start a new history): %w", wellknown.CapacityKneesAnnotation, err)
	}
	return h, nil
}

// Of returns the knee recorded for revision.
func (h History) Of(revision string) (Knee, bool) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Revision == revision {
			return h[i], true
		}
	}
	return Knee{}, false
}

// With returns the history with k as the newest entry (replacing an older
// one of the same revision), trimmed to the newest historyLimit.
func (h History) With(k Knee) History {
	out := slices.DeleteFunc(slices.Clone(h), func(old Knee) bool { return old.Revision == k.Revision })
	out = append(out, k)
	return out[max(0, len(out)-historyLimit):]
}

// String is the annotation's value.
func (h History) String() string {
	b, _ := json.Marshal(h)
	return string(b)
}
