package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Duration is a time.Duration written as a string with a unit: Go's form
// ("250ms", "1.5s", "1m30s") or Prometheus' ("5m", "1d", "1w", "1y").
// Bare numbers are refused: "10" could mean seconds or nanoseconds.
type Duration time.Duration

// ParseDuration reads Go's duration syntax, then Prometheus'.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), nil
	}
	return 0, fmt.Errorf("%q is not a duration: write it like \"250ms\", \"30s\", \"1m30s\" or \"1d\"", s)
}

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string such as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string; null leaves the zero value.
// Errors are *json.UnmarshalTypeError so that the decoder adds the field's
// path.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return typeError[Duration](fmt.Sprintf("%s %s (write a duration string such as \"30s\")", describeJSON(b), abbreviate(b)))
	}
	v, err := ParseDuration(s)
	if err != nil {
		return typeError[Duration](strconv.Quote(s) + ` (write it like "250ms", "30s", "1m30s" or "1d")`)
	}
	*d = Duration(v)
	return nil
}

// Number is a float64 written as a JSON number or as a string holding one
// ("0.5"): Argo's {{args.…}} substitution produces strings. A string may
// end in "%" to mean hundredths ("1%" is 0.01).
type Number float64

// MarshalJSON writes a JSON number.
func (n Number) MarshalJSON() ([]byte, error) { return json.Marshal(float64(n)) }

// UnmarshalJSON reads a number or a numeric string; null leaves the zero
// value. Non-finite values are refused.
func (n *Number) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	text := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &text); err != nil {
			return typeError[Number](abbreviate(b))
		}
		text = strings.TrimSpace(text)
	} else if len(b) > 0 && (b[0] == '{' || b[0] == '[' || b[0] == 't' || b[0] == 'f') {
		return typeError[Number](describeJSON(b) + " " + abbreviate(b))
	}
	scale := 1.0
	if rest, ok := strings.CutSuffix(text, "%"); ok {
		text, scale = strings.TrimSpace(rest), 0.01
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return typeError[Number](strconv.Quote(text) + " (write a finite number such as 0.5, or a percentage such as \"1%\")")
	}
	*n = Number(v * scale)
	return nil
}

func typeError[T any](value string) error {
	return &json.UnmarshalTypeError{Value: value, Type: reflect.TypeFor[T]()}
}

// abbreviate shortens a raw JSON value for an error message.
func abbreviate(b []byte) string {
	const limit = 40
	if len(b) > limit {
		return string(b[:limit]) + "…"
	}
	return string(b)
}

// Cores is an amount of CPU in cores, written as in a pod's resources: a
// quantity string ("250m", "0.5", "2"; resource.Quantity syntax) or a JSON
// number (0.5).
type Cores float64

// MarshalJSON writes a JSON number of cores.
func (c Cores) MarshalJSON() ([]byte, error) { return json.Marshal(float64(c)) }

// UnmarshalJSON reads a number of cores or a CPU quantity string; null
// leaves the zero value.
func (c *Cores) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err == nil {
		*c = Cores(f)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return typeError[Cores](fmt.Sprintf("%s %s (write cores like \"250m\" or 0.5)", describeJSON(b), abbreviate(b)))
	}
	// Kubernetes' own quantity parser: the same strings a pod's
	// resources.requests.cpu takes mean the same here.
	q, err := resource.ParseQuantity(strings.TrimSpace(s))
	if err != nil {
		return typeError[Cores](strconv.Quote(s) + ` (write cores like "250m", "0.5" or "2")`)
	}
	*c = Cores(q.AsApproximateFloat64())
	return nil
}

// CPUBudget is an amount of CPU for a pod's warm-up: cores, written as Cores
// ("250m", "0.5", 2), or a share of the pod's CPU request ("50%"), so one
// pod-template annotation keeps meaning the same as the request changes.
type CPUBudget struct {
	// Cores is the budget in cores when Share is 0.
	Cores float64
	// Share of the pod's CPU request (0.5 for "50%"); 0: Cores applies.
	Share float64
}

// Of is the budget in cores for a pod that requests request cores (0 when
// it is a share and the pod requests no CPU: no budget).
func (b CPUBudget) Of(request float64) float64 {
	if b.Share != 0 {
		return b.Share * request
	}
	return b.Cores
}

// String writes the budget as it is read: "50%" or the cores ("0.25").
func (b CPUBudget) String() string {
	if b.Share != 0 {
		return strconv.FormatFloat(b.Share*100, 'f', -1, 64) + "%"
	}
	return strconv.FormatFloat(b.Cores, 'f', -1, 64)
}

// MarshalJSON writes a share as "50%", cores as a JSON number.
func (b CPUBudget) MarshalJSON() ([]byte, error) {
	if b.Share != 0 {
		return json.Marshal(b.String())
	}
	return json.Marshal(b.Cores)
}

// UnmarshalJSON reads cores (as Cores does) or a share of the request
// ("50%"); null leaves the zero value.
func (b *CPUBudget) UnmarshalJSON(raw []byte) error {
	var s string
	if json.Unmarshal(bytes.TrimSpace(raw), &s) == nil && strings.HasSuffix(strings.TrimSpace(s), "%") {
		var share Number // reads "50%" as 0.5
		if err := share.UnmarshalJSON(raw); err != nil {
			return typeError[CPUBudget](strconv.Quote(s) + ` (write a share of the pod's CPU request like "50%", or cores like "250m")`)
		}
		*b = CPUBudget{Share: float64(share)}
		return nil
	}
	var c Cores
	if err := c.UnmarshalJSON(raw); err != nil {
		return typeError[CPUBudget](fmt.Sprintf("%s (write cores like \"250m\" or 0.5, or a share of the pod's CPU request like \"50%%\")", abbreviate(bytes.TrimSpace(raw))))
	}
	*b = CPUBudget{Cores: float64(c)}
	return nil
}
