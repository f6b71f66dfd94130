package gate

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// slots are the gate's warm-up slots (MaxConcurrent): a warm-up runs only
// while it holds one, and a pod waits in line for one. The slots are shared
// fairly between namespaces, so that one tenant's pods — many of them, with
// long deadlines — cannot keep another's from warming: a freed slot goes
// round the namespaces with pods in line (round-robin, each namespace's
// own pods first come first served), first to those holding fewer than
// their share, ceil(slots / namespaces holding or waiting for one). A
// namespace gets more than its share only when every namespace in line has
// its share already (no slot stays idle while a pod waits), and never more
// than perNamespace when that is positive. A warm-up running is never
// stopped for another: a namespace that took every slot while it was alone
// keeps them until its warm-ups end, which perNamespace prevents.
type slots struct {
	mu           sync.Mutex
	size         int
	perNamespace int
	held         int
	running      map[string]int // namespace → slots held
	waiting      []*slotWaiter  // in arrival order
	turns        []string       // namespaces in line, the next to be served first
}

// slotWaiter is one pod in line for a slot; ready closes once it has one.
type slotWaiter struct {
	namespace string
	ready     chan struct{}
	granted   bool
}

func newSlots(size, perNamespace int) *slots {
	return &slots{size: size, perNamespace: perNamespace, running: map[string]int{}}
}

// wait puts a warm-up of namespace in line and hands out what slots are
// free; the waiter's ready is closed already when it got one at once.
func (s *slots) wait(namespace string) *slotWaiter {
	w := &slotWaiter{namespace: namespace, ready: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = append(s.waiting, w)
	if !slices.Contains(s.turns, namespace) {
		s.turns = append(s.turns, namespace)
	}
	s.dispatch()
	return w
}

// acquire waits for w's slot: nil once it holds one, ctx's error when ctx
// ended first (w is out of line then, and holds nothing).
func (s *slots) acquire(ctx context.Context, w *slotWaiter) error {
	select {
	case <-w.ready:
		if ctx.Err() == nil {
			return nil
		}
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted { // granted meanwhile: give it back
		s.releaseLocked(w.namespace)
		return ctx.Err()
	}
	if i := slices.Index(s.waiting, w); i >= 0 {
		s.removeLocked(i)
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
		s.removeLocked(i)
		// Served: its turn comes again after the others in line.
		if j := slices.Index(s.turns, w.namespace); j >= 0 {
			s.turns = append(slices.Delete(s.turns, j, j+1), w.namespace)
		}
		s.held++
		s.running[w.namespace]++
		w.granted = true
		close(w.ready)
	}
}

// removeLocked takes s.waiting[i] out of line (its namespace out of the
// turns when it was its last). Caller holds s.mu.
func (s *slots) removeLocked(i int) {
	ns := s.waiting[i].namespace
	s.waiting = slices.Delete(s.waiting, i, i+1)
	if !slices.ContainsFunc(s.waiting, func(w *slotWaiter) bool { return w.namespace == ns }) {
		s.turns = slices.DeleteFunc(s.turns, func(n string) bool { return n == ns })
	}
}

// share is the slots one namespace may hold while others wait:
// ceil(size / namespaces holding or waiting for a slot). Caller holds s.mu.
func (s *slots) share() int {
	active := len(s.running)
	for _, ns := range s.turns {
		if s.running[ns] == 0 {
			active++
		}
	}
	if active == 0 {
		return s.size
	}
	return (s.size + active - 1) / active
}

// next is the index in s.waiting of the waiter to get the next free slot,
// -1 for none: the first in line of the first namespace in turn that holds
// less than its share, else of the first namespace in turn, leaving out
// namespaces at perNamespace. Caller holds s.mu.
func (s *slots) next() int {
	if len(s.turns) == 0 {
		return -1
	}
	pick := ""
	share := s.share()
	for _, ns := range s.turns {
		if s.perNamespace > 0 && s.running[ns] >= s.perNamespace {
			continue
		}
		if pick == "" {
			pick = ns
		}
		if s.running[ns] < share {
			pick = ns
			break
		}
	}
	if pick == "" {
		return -1
	}
	return slices.IndexFunc(s.waiting, func(w *slotWaiter) bool { return w.namespace == pick })
}

// queued is the Queued condition's message for a warm-up of namespace.
func (s *slots) queued(namespace string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.running[namespace]; s.perNamespace > 0 && n >= s.perNamespace {
		return fmt.Sprintf("queued: namespace %s holds %d warm-up slots, the most one namespace holds at once (--max-per-namespace)", namespace, n)
	}
	if n, share := s.running[namespace], s.share(); n >= share && len(s.turns) > 1 {
		return fmt.Sprintf("queued: namespace %s holds %d of the %d warm-up slots, its share while other namespaces wait (--max-concurrent)", namespace, n, s.size)
	}
	return fmt.Sprintf("queued: %d warm-ups running, the most at once (--max-concurrent)", s.size)
}

// busy is the number of slots held.
func (s *slots) busy() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}
