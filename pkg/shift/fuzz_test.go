package shift

import (
	"errors"
	"testing"
	"time"
)

// FuzzNextWhateverTheStoredState: whatever the kept state holds (any JSON
// the annotation may carry), any current weight, target, gate answer and
// time, Plan.Next decides a weight in 0–100, a back-off or failure never
// raises the canary, a move never passes the target, and the state it
// writes is consistent. The seed corpus runs in plain `go test`.
func FuzzNextWhateverTheStoredState(f *testing.F) {
	seeds := []string{
		``,
		`{"target":60,"weight":20,"lastGood":50,"increment":10,"phase":"Ramping"}`,
		`{"target":60,"weight":20,"lastGood":20,"increment":0,"phase":"Ramping"}`,
		`{"target":60,"weight":20,"lastGood":10,"increment":-7,"breaches":1,"phase":"Ramping"}`,
		`{"target":250,"weight":180,"lastGood":-40,"increment":9999999999,"phase":"Done"}`,
		`{"target":60,"weight":40,"lastGood":30,"increment":5,"breaches":-3,"phase":"Failed"}`,
		`{"target":60,"weight":40,"lastGood":40,"increment":10,"phase":"Ramping","awaitVerdict":true,"holdSince":"2025-03-01T11:00:00Z"}`,
		`{"target":60,"weight":40,"lastGood":30,"increment":10,"phase":"Ramping","lastChange":"2099-01-01T00:00:00Z"}`,
		`{"target":60,"weight":60,"lastGood":60,"increment":10,"phase":"Done","gateSince":"2025-03-01T11:00:00Z"}`,
		`{"phase":"Ramping"}`,
		`{not json`,
	}
	for i, raw := range seeds {
		f.Add(raw, uint8(40), uint8(60), uint8(i%3), false, int64(90))
		f.Add(raw, uint8(20), uint8(100), uint8((i+1)%3), true, int64(3600))
	}
	f.Fuzz(func(t *testing.T, raw string, current, target, answer uint8, ladder bool, elapsedSec int64) {
		prev, err := parseState(raw)
		if err != nil {
			return // Tick refuses it (except the abort, which never reads it)
		}
		cur, tgt := int(current)%101, int(target)%101
		p := Plan{Step: 10, Interval: 30 * time.Second, MaxHold: time.Minute}
		if ladder {
			p = Plan{Weights: []int{5, 10, 25, 50, 100}, Interval: 30 * time.Second, MaxHold: time.Minute}
		}
		g := &scriptedGate{answers: []verdict{[]verdict{pass, breach, {err: errors.New("no data")}}[answer%3]}}
		now := t0.Add(time.Duration(elapsedSec%100000) * time.Second)
		var prevCopy *State
		if prev != nil {
			c := *prev
			prevCopy = &c
		}
		d := p.Next(ctx, prevCopy, cur, tgt, now, g)
		if d.Weight < 0 || d.Weight > 100 {
			t.Fatalf("state %s, current %d, target %d: weight %d outside 0–100 (%+v)", raw, cur, tgt, d.Weight, d)
		}
		switch d.Action {
		case ActionBackOff, ActionFail, ActionHold, ActionDone:
			if d.Weight > cur {
				t.Fatalf("state %s, current %d, target %d: %s raised the canary to %d (%s)", raw, cur, tgt, d.Action, d.Weight, d.Reason)
			}
		case ActionMove:
			if d.Weight > tgt {
				t.Fatalf("state %s, current %d, target %d: moved to %d", raw, cur, tgt, d.Weight)
			}
		}
		if tgt == 0 {
			if d.Action != ActionAbort || d.Weight != 0 || d.State != nil {
				t.Fatalf("target 0: %+v, want an abort", d)
			}
			return
		}
		if d.State == nil || d.State.Weight != d.Weight {
			t.Fatalf("state %s: decision %+v keeps state %+v, want its weight", raw, d, d.State)
		}
		if err := d.State.Check(ladder, now); err != nil {
			t.Fatalf("state %s, current %d, target %d: wrote an inconsistent state %+v: %v", raw, cur, tgt, d.State, err)
		}
	})
}
