package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type inner struct {
	P99   Duration `json:"p99,omitempty"`
	Ratio Number   `json:"ratio,omitempty"`
}

type sample struct {
	Name   string   `json:"name"`
	Window Duration `json:"window,omitempty"`
	Count  int      `json:"count,omitempty"`
	SLO    inner    `json:"slo"`
	Items  []inner  `json:"items,omitempty"`
	Rate   *Number  `json:"rate,omitempty"`
}

func TestDecodeJSONAndYAMLAgree(t *testing.T) {
	jsonDoc := `{"name":"a","window":"1d","count":3,"slo":{"p99":"250ms","ratio":"1.5"},"rate":"1%"}`
	yamlDoc := "name: a\nwindow: 1d\ncount: 3\nslo:\n  p99: 250ms\n  ratio: 1.5\nrate: 1%\n"
	for name, doc := range map[string]string{"json": jsonDoc, "yaml": yamlDoc} {
		var s sample
		if err := Decode([]byte(doc), &s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Window.D() != 24*time.Hour || s.SLO.P99.D() != 250*time.Millisecond || s.SLO.Ratio != 1.5 || s.Count != 3 {
			t.Errorf("%s: decoded %+v", name, s)
		}
		if s.Rate == nil || *s.Rate != 0.01 {
			t.Errorf("%s: rate = %v, want 0.01", name, s.Rate)
		}
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	cases := map[string]struct{ doc, want string }{
		"unknown nested":      {`{"slo":{"p99x":"1s"}}`, "slo.p99x: unknown field"},
		"unknown in list":     {`{"items":[{"p99":"1s","bad":1}]}`, "items[0].bad: unknown field"},
		"wrong case":          {`{"SLO":{}}`, "SLO: unknown field"},
		"duplicate":           {`{"name":"a","name":"b"}`, "name: set twice"},
		"object duration":     {`{"slo":{"p99":{"ms":5}}}`, "slo.p99: want a duration, got an object"},
		"number duration":     {`{"window":10}`, `window: want a duration, got a number 10`},
		"bad duration":        {`{"window":"soon"}`, `window: want a duration, got "soon"`},
		"bad number":          {`{"slo":{"ratio":"fast"}}`, `slo.ratio: want a number, got "fast"`},
		"NaN number":          {`{"slo":{"ratio":"NaN"}}`, `slo.ratio: want a number`},
		"wrong type":          {`{"count":"three"}`, "count: want a whole number"},
		"trailing text":       {`{"name":"a"} extra`, "not valid JSON"},
		"second object":       {`{"name":"a"}{"name":"b"}`, "not valid JSON"},
		"empty":               {"  \n", "empty"},
		"yaml list":           {"- a\n- b\n", "want a mapping of fields, got a list"},
		"yaml unknown":        {"slo:\n  p98: 1s\n", "slo.p98: unknown field"},
		"yaml duplicate keys": {"name: a\nname: b\n", "not valid YAML"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var s sample
			err := Decode([]byte(c.doc), &s)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Decode(%s) = %v, want an error containing %q", c.doc, err, c.want)
			}
		})
	}
}

func TestErrorsKeepNestedPaths(t *testing.T) {
	var inner Errors
	inner.Addf("slo.p99", "must be positive")
	inner.Addf("window", "too short")
	var outer Errors
	outer.Add("gate", inner.Err())
	outer.Add("ramp", nil)
	outer.Addf("ramp.step", "must be at least 1")
	got := outer.Err().Error()
	for _, want := range []string{"gate.slo.p99: must be positive", "gate.window: too short", "ramp.step: must be at least 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("joined errors %q lack %q", got, want)
		}
	}
	if (Errors{}).Err() != nil {
		t.Error("no problems must be a nil error")
	}
}

func TestDurationRoundTrip(t *testing.T) {
	for in, want := range map[string]time.Duration{"1.5s": 1500 * time.Millisecond, "1m30s": 90 * time.Second, "2w": 14 * 24 * time.Hour, "5m": 5 * time.Minute} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	b, _ := Duration(90 * time.Second).MarshalJSON()
	if string(b) != `"1m30s"` {
		t.Errorf("MarshalJSON = %s", b)
	}
}

// Cores reads what a pod's resources.requests.cpu takes: millicores,
// decimals, numbers; anything else names the field.
func TestCoresReadsCPUQuantities(t *testing.T) {
	var v struct {
		CPU Cores `json:"cpu"`
	}
	for in, want := range map[string]Cores{`"250m"`: 0.25, `"2"`: 2, `"0.5"`: 0.5, `0.5`: 0.5, `"1500m"`: 1.5, `null`: 0} {
		v.CPU = 0
		if err := Decode([]byte(`{"cpu": `+in+`}`), &v); err != nil || v.CPU != want {
			t.Errorf("cpu %s: %g, %v; want %g", in, v.CPU, err, want)
		}
	}
	for _, in := range []string{`"lots"`, `"250 m"`, `true`} {
		if err := Decode([]byte(`{"cpu": `+in+`}`), &v); err == nil || !strings.Contains(err.Error(), "cpu: want cores") {
			t.Errorf("cpu %s: %v; want an error naming cpu", in, err)
		}
	}
}

// CPUBudget reads cores as Cores does, or a share of the pod's CPU request;
// it scales a share by the request and writes both back as read.
func TestCPUBudgetReadsCoresOrAShareOfTheRequest(t *testing.T) {
	var v struct {
		Budget CPUBudget `json:"cpuBudget"`
	}
	for in, want := range map[string]CPUBudget{`"250m"`: {Cores: 0.25}, `0.5`: {Cores: 0.5}, `"50%"`: {Share: 0.5}, `" 25 %"`: {Share: 0.25}, `"0%"`: {}, `null`: {}} {
		v.Budget = CPUBudget{}
		if err := Decode([]byte(`{"cpuBudget": `+in+`}`), &v); err != nil || v.Budget != want {
			t.Errorf("cpuBudget %s: %+v, %v; want %+v", in, v.Budget, err, want)
		}
	}
	if got := (CPUBudget{Share: 0.5}).Of(0.25); got != 0.125 {
		t.Errorf("50%% of a 250m request: %g cores, want 0.125", got)
	}
	if got := (CPUBudget{Share: 0.5}).Of(0); got != 0 {
		t.Errorf("50%% of no request: %g cores, want 0 (no budget)", got)
	}
	if got := (CPUBudget{Cores: 0.3}).Of(2); got != 0.3 {
		t.Errorf("0.3 cores of a 2-core request: %g, want 0.3 (cores ignore the request)", got)
	}
	for b, want := range map[CPUBudget]string{{Share: 0.5}: `"50%"`, {Cores: 0.25}: `0.25`} {
		if out, err := json.Marshal(b); err != nil || string(out) != want {
			t.Errorf("marshal %+v: %s, %v; want %s", b, out, err, want)
		}
	}
	for _, in := range []string{`"lots"`, `"half%"`, `true`, `"%"`} {
		if err := Decode([]byte(`{"cpuBudget": `+in+`}`), &v); err == nil || !strings.Contains(err.Error(), "cpuBudget: want cores or a share of the CPU request") {
			t.Errorf("cpuBudget %s: %v; want an error naming cpuBudget", in, err)
		}
	}
}
