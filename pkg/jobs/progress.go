package jobs

import "sync"

// Progress is the value of a job that only reports a message while it runs
// and a result once it is over (a source: load measurement: its latest
// load progress, then its verdict).
type Progress[R any] struct {
	mu      sync.Mutex
	message string
	result  R
}

// NewProgress returns a Progress whose message is message until the first
// Report.
func NewProgress[R any](message string) *Progress[R] { return &Progress[R]{message: message} }

// Report replaces the progress message.
func (p *Progress[R]) Report(message string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.message = message
}

// Message is the latest progress message.
func (p *Progress[R]) Message() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.message
}

// SetResult keeps the job's result; the job's function sets it before it
// returns.
func (p *Progress[R]) SetResult(r R) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.result = r
}

// Result is the job's result once j finished.
func Result[R any](j *Job[*Progress[R]]) (R, bool) {
	if !j.Finished() {
		var zero R
		return zero, false
	}
	j.Value.mu.Lock()
	defer j.Value.mu.Unlock()
	return j.Value.result, true
}
