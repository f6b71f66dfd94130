package traffic

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"fortio.org/fortio/periodic"
)

// record is a Sample stored compactly while traffic runs: 24 bytes and no
// pointers (time.Time holds a *Location), so a long run costs little memory
// and the garbage collector never scans the records.
type record struct {
	start   int64 // nanoseconds since the recorder's origin (monotonic clock)
	latency int64 // nanoseconds
	code    int32
}

// recordChunk is how many records one chunk holds. Records go into chunks
// rather than one growing slice, so appending never copies what is already
// stored (a copy would hold the lock while request goroutines wait).
const recordChunk = 8192

// recorder is the periodic.AccessLogger that collects every request of a
// traffic run. periodic calls Report on each connection's goroutine after
// every request, with the start time and latency it measured itself.
type recorder struct {
	origin time.Time // carries a monotonic reading; sample starts are offsets from it

	count  atomic.Int64
	errors atomic.Int64

	mu     sync.Mutex
	chunks [][]record
}

func newRecorder(origin time.Time) *recorder {
	return &recorder{origin: origin}
}

// Start implements periodic.AccessLogger.
func (r *recorder) Start(ctx context.Context, _ periodic.ThreadID, _ int64, _ time.Time) context.Context {
	return ctx
}

// Report implements periodic.AccessLogger. details is the HTTP status code
// the Runnable returned (fetch.Run).
func (r *recorder) Report(_ context.Context, _ periodic.ThreadID, _ int64, start time.Time, latency float64, ok bool, details string) {
	code, err := strconv.Atoi(details)
	if err != nil {
		code = -1
	}
	rec := record{
		start:   int64(start.Sub(r.origin)),
		latency: int64(latency * float64(time.Second)),
		code:    int32(code),
	}
	r.mu.Lock()
	last := len(r.chunks) - 1
	if last < 0 || len(r.chunks[last]) == recordChunk {
		r.chunks = append(r.chunks, make([]record, 0, recordChunk))
		last++
	}
	r.chunks[last] = append(r.chunks[last], rec)
	r.mu.Unlock()
	r.count.Add(1)
	if !ok {
		r.errors.Add(1)
	}
}

// Info implements periodic.AccessLogger.
func (r *recorder) Info() string { return "danki demo traffic samples" }

// samples returns every recorded request ordered by start time and releases
// the compact records. Call it only after the run ended.
func (r *recorder) samples() []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.chunks {
		n += len(c)
	}
	all := make([]record, 0, n)
	for _, c := range r.chunks {
		all = append(all, c...)
	}
	r.chunks = nil
	// Records arrive in completion order; consumers (phases, charts, the
	// warm-up curve) want start order.
	slices.SortStableFunc(all, func(a, b record) int { return cmp.Compare(a.start, b.start) })
	out := make([]Sample, len(all))
	for i, rec := range all {
		out[i] = Sample{
			Start:   r.origin.Add(time.Duration(rec.start)),
			Latency: time.Duration(rec.latency),
			Code:    int(rec.code),
		}
	}
	return out
}
