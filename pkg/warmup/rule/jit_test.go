package rule

import (
	"strings"
	"testing"
)

// The rule's hook: a still compiling JIT holds a converged check back
// (not a rejection); a quiet or stale one changes nothing.
func TestJITHold(t *testing.T) {
	cfg := defaults()
	var windows []Window
	for i := 1; i <= 20; i++ {
		windows = append(windows, Window{Index: i, Requests: int64(i * cfg.Window)})
	}
	converged := check{verdict: verdict{converged: true, plateau: true}}
	compiling := &jitSignal{readings: []Reading{{0, 5000}, {1000, 5500}, {1900, 6000}}}
	if ch := compiling.hold(&cfg, converged, windows); ch.converged || !strings.Contains(ch.why, "the JIT is still compiling: +500 ms over the last 900 requests") {
		t.Errorf("compiling: %+v, want held", ch)
	}
	rejected := check{verdict: verdict{converged: true}, rejected: "slower"}
	if ch := compiling.hold(&cfg, rejected, windows); !ch.converged || ch.rejected == "" {
		t.Errorf("a rejection was held back: %+v", ch)
	}
	quiet := &jitSignal{readings: []Reading{{0, 5000}, {1000, 6000}, {1500, 6010}, {1900, 6020}}}
	if ch := quiet.hold(&cfg, converged, windows); !ch.converged || quiet.quietFrom != 1000 {
		t.Errorf("quiet: %+v, quiet from %d; want converged, quiet from 1000", ch, quiet.quietFrom)
	}
	stale := &jitSignal{readings: []Reading{{0, 5000}, {900, 6000}}}
	if ch := stale.hold(&cfg, converged, windows); !ch.converged {
		t.Errorf("stale readings held the stop back: %+v", ch)
	}
	// A big service keeps compiling in the background: more than 3 % of
	// its total per block, held while its rate is above a tenth of its
	// peak, quiet once it is not.
	big := &jitSignal{}
	look := func(requests int64, ms float64) check {
		big.readings = append(big.readings, Reading{requests, ms})
		var ws []Window
		for i := 1; int64(i*cfg.Window) <= requests; i++ {
			ws = append(ws, Window{Index: i, Requests: int64(i * cfg.Window)})
		}
		return big.hold(&cfg, converged, ws)
	}
	look(0, 10000)
	look(300, 16000)  // 20 ms per request: the peak
	look(600, 22000)  // still 20
	look(900, 22900)  // 3 ms per request over the last 300: 4 %, 15 % of the peak
	look(1200, 23800) // the same
	if ch := look(1500, 24700); ch.converged || !strings.Contains(ch.why, "peak 20.00 ms per request") {
		t.Errorf("compiling at 15 %% of its peak rate: %+v, want held, naming the peak", ch)
	}
	look(1800, 25000) // 1 ms per request: 1.2 % of its total
	if ch := look(2100, 25300); !ch.converged {
		t.Errorf("compiling at 5 %% of its peak rate: %+v, want quiet", ch)
	}
	bg := &jitSignal{readings: []Reading{{0, 20000}, {1000, 20400}, {1900, 21200}}} // 0.9 ms per request, 3.8 % of its total, its own peak
	if ch := bg.hold(&cfg, converged, windows); ch.converged {
		t.Errorf("a JIT adding 3.8 %% of its total at its highest rate seen passed as quiet: %+v", ch)
	}
}
