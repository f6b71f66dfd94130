package analysis

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The SLO checks: evaluate judges a Sample under the compiled Rules, one
// Check per limit, and the worst phase is the verdict.

// evaluate turns a sample into a verdict under the validated rules.
func evaluate(r *Rules, s *Sample, window string) Verdict {
	if err := checkSample(r, s); err != nil {
		var queries []string
		if s != nil {
			queries = s.Queries
		}
		return errorVerdict(err, window, queries)
	}
	v := Verdict{Window: window, Queries: s.Queries}
	v.Canary = sideStats(&s.Canary)
	if s.Stable != nil {
		v.Stable = sideStats(s.Stable)
	}
	add := func(c Check) { v.Checks = append(v.Checks, c) }

	for _, l := range r.limits {
		add(absoluteCheck(r, l, &s.Canary))
	}
	for _, l := range r.ratios {
		add(ratioCheck(r, l, &s.Canary, s.Stable))
	}
	if r.maxMs > 0 {
		add(maxCheck(r, &s.Canary))
	}
	if r.hasErrorRate {
		add(errorRateCheck(r, &s.Canary))
	}
	if r.tail != nil {
		c, t := tailCheck(r, &s.Canary, s.Stable)
		add(c)
		v.Tail = t
	}
	for i, q := range r.queries {
		if q.max > 0 {
			add(queryCheck(q, &s.Canary, i))
		}
		if q.maxRatio > 0 {
			add(queryRatioCheck(q, &s.Canary, s.Stable, i))
		}
	}

	v.Phase = Pass
	for _, c := range v.Checks {
		if c.Phase == Fail {
			v.Phase = Fail
			break
		}
		if c.Phase == Inconclusive {
			v.Phase = Inconclusive
		}
	}
	v.Summary = summarize(v)
	return v
}

// checkSample rejects samples no verdict can be computed from: none at all,
// one with nothing in it (a custom Source that returned an empty Sample),
// one with fewer query values than the config has queries, and non-finite
// numbers (+Inf or NaN bucket counts would turn every comparison into NaN,
// and NaN compares as "not above the limit").
func checkSample(r *Rules, s *Sample) error {
	if s == nil {
		return errors.New("the latency source returned no sample (nil) and no error")
	}
	sides := []*Side{&s.Canary}
	if s.Stable != nil {
		sides = append(sides, s.Stable)
	}
	c := &s.Canary
	if c.LatencyFrom == "" && len(c.Latency.Buckets) == 0 && !c.Requests.configured() && !c.Errors.configured() && len(c.Values) == 0 {
		return errors.New("the latency source returned an empty sample: the canary has no latency histogram, request count or query value (a custom Source must fill Sample.Canary)")
	}
	for _, side := range sides {
		name := side.Name
		if name == "" {
			name = "canary"
			if side != c {
				name = "stable"
			}
		}
		if len(side.Values) < len(r.queries) && (side == c || r.needsStableValues()) {
			return fmt.Errorf("the latency source returned %d query values for %s, the config has %d queries", len(side.Values), name, len(r.queries))
		}
		if b, bad := side.Latency.nonFinite(); bad {
			return fmt.Errorf("%s latency histogram has a non-finite count %v in bucket le=%q (from %s): the data is broken, not slow or fast; check the query and the exporter",
				name, b.Count, strconv.FormatFloat(b.UpperBound, 'g', -1, 64), orUnknown(side.LatencyFrom))
		}
		for _, m := range append([]Measured{side.Requests, side.Errors}, side.Values...) {
			if m.Found && (math.IsNaN(m.Value) || math.IsInf(m.Value, 0)) {
				return fmt.Errorf("%s: query returned the non-finite value %v: %s", name, m.Value, orUnknown(m.From))
			}
		}
	}
	return nil
}

func orUnknown(from string) string {
	if from == "" {
		return "an unnamed source"
	}
	return from
}

// needsStableValues reports whether some query compares with stable.
func (r *Rules) needsStableValues() bool {
	for _, q := range r.queries {
		if q.maxRatio > 0 {
			return true
		}
	}
	return false
}

// errorVerdict is the verdict when nothing could be measured.
func errorVerdict(err error, window string, queries []string) Verdict {
	return Verdict{
		Phase:   Error,
		Window:  window,
		Queries: queries,
		Error:   err.Error(),
		Summary: "Error: " + oneLine(err.Error()),
		err:     err,
	}
}

func sideStats(side *Side) *SideStats {
	st := &SideStats{Count: side.Latency.Count()}
	if side.Latency.usable() {
		set := func(q float64) *float64 {
			if top, above := side.Latency.AboveTop(q); above {
				if st.AboveMs == nil {
					st.AboveMs = map[string]float64{}
				}
				st.AboveMs[quantileKey(q)] = top
				return nil // not a number: only "above top" is known
			}
			return num(side.Latency.Quantile(q))
		}
		st.P50, st.P90, st.P95, st.P99, st.P999 = set(0.5), set(0.9), set(0.95), set(0.99), set(0.999)
		if side.Latency.HasRaw {
			st.Min, st.Max = num(side.Latency.Min), num(side.Latency.Max)
		}
	}
	if side.Requests.Found {
		st.Requests = num(side.Requests.Value)
		errs := 0.0
		if side.Errors.Found {
			errs = side.Errors.Value
		}
		if side.Errors.configured() {
			st.Errors = num(errs)
			if side.Requests.Value > 0 {
				st.ErrorRate = num(math.Min(1, errs/side.Requests.Value))
			}
		}
	}
	for _, m := range side.Values {
		if m.Found {
			if st.Values == nil {
				st.Values = map[string]float64{}
			}
			st.Values[m.Name] = m.Value
		}
	}
	return st
}

// latencyProblem says why a side's latency cannot support a check that needs
// `need` observations, or "" when it can.
func latencyProblem(side *Side, need float64, why string) string {
	switch {
	case side == nil:
		return "no stable version is configured"
	case side.LatencyFrom == "":
		return side.Name + " latency is not measured"
	case len(side.Latency.Buckets) == 0:
		return fmt.Sprintf("%s: no data, query returned no series: %s", side.Name, side.LatencyFrom)
	case side.Latency.Count() < need:
		return fmt.Sprintf("%s has %s requests in the window, needs %s (%s); from %s",
			side.Name, count(side.Latency.Count()), count(need), why, side.LatencyFrom)
	case !side.Latency.usable():
		return fmt.Sprintf("%s: histogram has no le=\"+Inf\" bucket, so its total is unknown: %s", side.Name, side.LatencyFrom)
	}
	return ""
}

// needFor is how many observations a check on quantile q needs.
func needFor(r *Rules, q float64) (float64, string) {
	tail := math.Ceil(r.minTailCount / (1 - q))
	if tail > r.minSamples {
		return tail, fmt.Sprintf("minTailCount %g ÷ (1−%g)", r.minTailCount, q)
	}
	return r.minSamples, "minSamples"
}

func absoluteCheck(r *Rules, l quantileLimit, canary *Side) Check {
	c := Check{Name: l.key, Limit: l.limit, Unit: "ms"}
	need, why := needFor(r, l.q)
	if p := latencyProblem(canary, need, why); p != "" {
		return inconclusive(c, "%s: %s", l.label, p)
	}
	if top, above := canary.Latency.AboveTop(l.q); above {
		if l.limit <= top {
			return fail(c, "%s above %s (in the +Inf bucket, above the top bucket bound) > %s SLO", l.label, ms(top), ms(l.limit))
		}
		return inconclusive(c, "%s is above %s, the top bucket bound: the histogram cannot tell whether it is ≤ %s; add buckets above %s",
			l.label, ms(top), ms(l.limit), ms(top))
	}
	val := canary.Latency.Quantile(l.q)
	c.Value = num(val)
	note := ""
	if lo, hi, ok := canary.Latency.boundsAround(val); ok && lo < l.limit && l.limit < hi && !canary.Latency.HasRaw {
		note = fmt.Sprintf(" (limit inside the %s–%s bucket: decided by interpolation)", ms(lo), ms(hi))
	}
	if val <= l.limit {
		return pass(c, "%s %s ≤ %s%s", l.label, ms(val), ms(l.limit), note)
	}
	return fail(c, "%s %s > %s SLO%s", l.label, ms(val), ms(l.limit), note)
}

func ratioCheck(r *Rules, l quantileLimit, canary, stable *Side) Check {
	c := Check{Name: "ratio:" + l.key, Limit: l.limit, Unit: "ratio"}
	need, why := needFor(r, l.q)
	if p := latencyProblem(canary, need, why); p != "" {
		return inconclusive(c, "%s ratio: %s", l.label, p)
	}
	if p := latencyProblem(stable, need, why); p != "" {
		return inconclusive(c, "%s ratio: %s", l.label, p)
	}
	cv, sv := canary.Latency.Quantile(l.q), stable.Latency.Quantile(l.q)
	cTop, cAbove := canary.Latency.AboveTop(l.q)
	sTop, sAbove := stable.Latency.AboveTop(l.q)
	switch {
	case cAbove && sAbove:
		return inconclusive(c, "%s ratio: canary's and stable's %s are both above the top bucket bound (%s, %s): the histogram cannot tell; add buckets above them",
			l.label, l.label, ms(cTop), ms(sTop))
	case cAbove && sv > 0 && cTop/sv >= l.limit:
		// The canary's percentile is above cTop, so the ratio is above cTop/sv.
		return fail(c, "%s canary/stable above %.2f (canary above %s, the top bucket bound / %s) > %g", l.label, cTop/sv, ms(cTop), ms(sv), l.limit)
	case cAbove:
		return inconclusive(c, "%s ratio: canary's %s is above %s, the top bucket bound: the histogram cannot tell whether canary/stable ≤ %g; add buckets above %s",
			l.label, l.label, ms(cTop), l.limit, ms(cTop))
	case sAbove && cv/sTop <= l.limit:
		// Stable's percentile is above sTop, so the ratio is below cv/sTop.
		return pass(c, "%s canary/stable below %.2f (%s / stable above %s, the top bucket bound) ≤ %g", l.label, cv/sTop, ms(cv), ms(sTop), l.limit)
	case sAbove:
		return inconclusive(c, "%s ratio: stable's %s is above %s, the top bucket bound: the histogram cannot tell the ratio; add buckets above %s",
			l.label, l.label, ms(sTop), ms(sTop))
	}
	if !(sv > 0) {
		return inconclusive(c, "%s ratio: stable's %s is %s, the ratio is undefined", l.label, l.label, ms(sv))
	}
	ratio := cv / sv
	c.Value = num(ratio)
	if ratio <= l.limit {
		return pass(c, "%s canary/stable %.2f (%s / %s) ≤ %g", l.label, ratio, ms(cv), ms(sv), l.limit)
	}
	return fail(c, "%s canary/stable %.2f (%s / %s) > %g", l.label, ratio, ms(cv), ms(sv), l.limit)
}

func maxCheck(r *Rules, canary *Side) Check {
	c := Check{Name: "max", Limit: r.maxMs, Unit: "ms"}
	h := canary.Latency
	if canary.LatencyFrom == "" || !h.HasRaw || h.Count() == 0 {
		return inconclusive(c, "max: %s", latencyProblem(canary, 1, "raw latencies"))
	}
	c.Value = num(h.Max)
	// The maximum only grows with more samples: a breach is final even
	// before minSamples, a pass is not.
	if h.Max > r.maxMs {
		return fail(c, "max %s > %s SLO", ms(h.Max), ms(r.maxMs))
	}
	if p := latencyProblem(canary, r.minSamples, "minSamples"); p != "" {
		return inconclusive(c, "max: %s", p)
	}
	return pass(c, "max %s ≤ %s", ms(h.Max), ms(r.maxMs))
}

func errorRateCheck(r *Rules, canary *Side) Check {
	c := Check{Name: "error-rate", Limit: r.errorRate, Unit: "fraction"}
	req := canary.Requests
	switch {
	case !req.configured():
		return inconclusive(c, "error rate: requests are not measured")
	case !req.Found:
		return inconclusive(c, "error rate: canary: %s", req.missing())
	case req.Value < r.minSamples:
		return inconclusive(c, "error rate: canary has %s requests in the window, needs %s (minSamples); from %s",
			count(req.Value), count(r.minSamples), req.From)
	}
	errs := 0.0 // no series of failed requests means none failed
	if canary.Errors.Found {
		errs = canary.Errors.Value
	}
	rate := math.Min(1, errs/req.Value)
	c.Value = num(rate)
	note := ""
	if r.errorRateDefault {
		note = ", default limit: latency is judged with errors"
	}
	if rate <= r.errorRate {
		return pass(c, "error rate %s ≤ %s (%s of %s%s)", pct(rate), pct(r.errorRate), count(errs), count(req.Value), note)
	}
	return fail(c, "error rate %s > %s SLO (%s of %s%s)", pct(rate), pct(r.errorRate), count(errs), count(req.Value), note)
}

func tailCheck(r *Rules, canary, stable *Side) (Check, *TailTest) {
	t := r.tail
	c := Check{Name: "tail-test", Unit: "e-value", Limit: 1 / (1 - t.confidence)}
	// Both sides need minTailCount/(1−q) requests: with fewer canary
	// requests only about one exceedance is expected, and a chance pair of
	// them was a third of the A/A false alarms at low canary weight.
	need, why := needFor(r, t.q)
	if p := latencyProblem(canary, need, why); p != "" {
		return inconclusive(c, "tail test: %s", p), nil
	}
	if p := latencyProblem(stable, need, why); p != "" {
		return inconclusive(c, "tail test: %s", p), nil
	}
	res, err := RunTailTest(canary.Latency, stable.Latency, t.q, t.confidence, t.margin)
	if err != nil {
		return inconclusive(c, "tail test: %v", err), nil
	}
	c.Value = num(res.EValue)
	margin := ""
	if t.margin > 0 {
		margin = " + margin " + pct(t.margin)
	}
	detail := fmt.Sprintf("canary %s vs stable %s%s above stable's p%s bound %s (%s/%s vs %s/%s), e=%s",
		pct(res.CanaryRate), pct(res.StableRate), margin, quantileName(t.q), ms(res.ThresholdMs),
		count(res.CanaryAbove), count(res.CanaryCount), count(res.StableAbove), count(res.StableCount), evalue(res.EValue))
	// The e-value is the mean over the bounds of stable's tail; name the
	// bound where the canary differs most when it is not the p99 bound.
	if s := res.Thresholds[res.Strongest]; s.ThresholdMs != res.ThresholdMs {
		detail += fmt.Sprintf(", most above %s (%s vs %s)", ms(s.ThresholdMs), count(s.CanaryAbove), count(s.StableAbove))
	}
	if res.Rejected {
		return fail(c, "tail test: %s ≥ %g: canary's tail is heavier (%g%% confidence)", detail, res.RejectAt, t.confidence*100), &res
	}
	return pass(c, "tail test: %s < %g", detail, res.RejectAt), &res
}

func queryCheck(q queryRule, canary *Side, i int) Check {
	c := Check{Name: "query:" + q.name, Limit: q.max}
	m := canary.Values[i]
	if !m.Found {
		return inconclusive(c, "%s: canary: %s", q.name, m.missing())
	}
	c.Value = num(m.Value)
	if m.Value <= q.max {
		return pass(c, "%s %.4g ≤ %g", q.name, m.Value, q.max)
	}
	return fail(c, "%s %.4g > %g", q.name, m.Value, q.max)
}

func queryRatioCheck(q queryRule, canary, stable *Side, i int) Check {
	c := Check{Name: "query-ratio:" + q.name, Limit: q.maxRatio, Unit: "ratio"}
	cm := canary.Values[i]
	if !cm.Found {
		return inconclusive(c, "%s ratio: canary: %s", q.name, cm.missing())
	}
	if stable == nil || i >= len(stable.Values) {
		return inconclusive(c, "%s ratio: no stable version is configured", q.name)
	}
	sm := stable.Values[i]
	if !sm.Found {
		return inconclusive(c, "%s ratio: stable: %s", q.name, sm.missing())
	}
	switch {
	case sm.Value == 0 && cm.Value == 0:
		c.Value = num(1)
		return pass(c, "%s ratio: canary and stable both 0", q.name)
	case sm.Value == 0:
		return inconclusive(c, "%s ratio: stable's value is 0, the ratio is undefined (canary %.4g)", q.name, cm.Value)
	}
	ratio := cm.Value / sm.Value
	c.Value = num(ratio)
	if ratio <= q.maxRatio {
		return pass(c, "%s canary/stable %.2f (%.4g / %.4g) ≤ %g", q.name, ratio, cm.Value, sm.Value, q.maxRatio)
	}
	return fail(c, "%s canary/stable %.2f (%.4g / %.4g) > %g", q.name, ratio, cm.Value, sm.Value, q.maxRatio)
}

func pass(c Check, format string, args ...any) Check {
	c.Phase, c.Message = Pass, fmt.Sprintf(format, args...)
	return c
}

func fail(c Check, format string, args ...any) Check {
	c.Phase, c.Message = Fail, fmt.Sprintf(format, args...)
	return c
}

func inconclusive(c Check, format string, args ...any) Check {
	c.Phase, c.Message = Inconclusive, fmt.Sprintf(format, args...)
	return c
}

// num returns a pointer to a finite value, nil otherwise (JSON has no NaN).
func num(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}
