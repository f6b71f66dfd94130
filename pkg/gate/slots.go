package gate

import (
	"context"
	"fmt"
	"sync"
)

// slots are the gate's warm-up slots (MaxConcurrent): a warm-up runs only
// while it holds one, and a pod waits in line for one.
type slots struct {
	mu      sync.Mutex
	size    int
	held    int
	running map[string]int // namespace → slots held
	waiting []*slotWaiter  // in arrival order
}

// slotWaiter is one pod in line for a slot; ready closes once it has one.
type slotWaiter struct {
	namespace string
	ready     chan struct{}
	granted   bool
}

func newSlots(size int) *slots {
	return &slots{size: size, running: map[string]int{}}
}

// wait puts a warm-up of namespace in line and hands out what slots are
// free; the waiter's ready is closed already when it got one at once.
func (s *slots) wait(namespace string) *slotWaiter {
	w := &slotWaiter{namespace: namespace, ready: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = append(s.waiting, w)
	s.dispatch()
	return w
}

// acquire waits for w's slot: nil once it holds one, ctx's error when ctx
// ended first (w is out of line then, and holds nothing).
func (s *slots) acquire(ctx context.Context, w *slotWaiter) error {
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted { // granted meanwhile: give it back
		s.releaseLocked(w.namespace)
		return ctx.Err()
	}
	for i, x := range s.waiting {
		if x == w {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			break
		}
	}
	return ctx.Err()
}

// release gives back a slot of namespace.
func (s *slots) release(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(namespace)
}

func (s *slots) releaseLocked(namespace string) {
	s.held--
	if s.running[namespace]--; s.running[namespace] <= 0 {
		delete(s.running, namespace)
	}
	s.dispatch()
}

// dispatch hands free slots to waiters. Caller holds s.mu.
func (s *slots) dispatch() {
	for s.held < s.size && len(s.waiting) > 0 {
		i := s.next()
		if i < 0 {
			return
		}
		w := s.waiting[i]
		s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
		s.held++
		s.running[w.namespace]++
		w.granted = true
		close(w.ready)
	}
}

// next is the index in s.waiting of the waiter to get the next free slot,
// -1 for none.
func (s *slots) next() int {
	if len(s.waiting) == 0 {
		return -1
	}
	return 0
}

// queued is the Queued condition's message for a warm-up of namespace.
func (s *slots) queued(namespace string) string {
	return fmt.Sprintf("queued: %d warm-ups running, the most at once", s.size)
}

// busy is the number of slots held.
func (s *slots) busy() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}
