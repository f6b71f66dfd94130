package gate

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// granted reports whether w holds a slot now.
func granted(w *slotWaiter) bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

func TestSlotsAnotherNamespaceGetsTheNextFreeSlot(t *testing.T) {
	s := newSlots(2, 0)
	var a []*slotWaiter
	for i := range 10 { // namespace A fills the slots and the line first
		a = append(a, s.wait("a"))
		if want := i < 2; granted(a[i]) != want {
			t.Fatalf("a[%d] granted %v, want %v", i, granted(a[i]), want)
		}
	}
	b := s.wait("b")
	if granted(b) {
		t.Fatal("b granted with every slot held")
	}
	s.release("a") // a[0] done
	if !granted(b) {
		t.Fatal("a slot freed, and b, the only other namespace in line, did not get it")
	}
	for i := 2; i < 10; i++ {
		if granted(a[i]) {
			t.Fatalf("a[%d] got the slot b waited for", i)
		}
	}
	s.release("a") // a[1] done: A's turn again
	if !granted(a[2]) {
		t.Fatal("a[2] not granted once b held its slot")
	}
}

func TestSlotsShareBetweenNamespaces(t *testing.T) {
	s := newSlots(6, 0)
	held := map[string]int{}
	var line []*slotWaiter
	for range 20 {
		line = append(line, s.wait("a"))
	}
	for range 5 {
		line = append(line, s.wait("b"))
	}
	for range 5 {
		line = append(line, s.wait("c"))
	}
	count := func() {
		clear(held)
		for _, w := range line {
			if granted(w) {
				held[w.namespace]++
			}
		}
	}
	count()
	if held["a"] != 6 {
		t.Fatalf("held %v; want a's six, first in line with all free", held)
	}
	// As A's warm-ups finish, the freed slots go round the namespaces
	// until none holds more than ceil(6/3) = 2 while others wait.
	for i := 0; i < 4; i++ {
		s.release("a")
		// Mark the finished waiter as no longer holding: drop one of a's.
		for j, w := range line {
			if w.namespace == "a" && granted(w) {
				line = append(line[:j], line[j+1:]...)
				break
			}
		}
	}
	count()
	if fmt.Sprint(held) != fmt.Sprint(map[string]int{"a": 2, "b": 2, "c": 2}) {
		t.Fatalf("held %v after four of a's finished; want 2 each", held)
	}
}

func TestSlotsWorkConservingAndCancel(t *testing.T) {
	s := newSlots(3, 0)
	// One namespace alone may use every slot.
	for i := range 3 {
		if !granted(s.wait("a")) {
			t.Fatalf("a #%d not granted with slots free and no one else in line", i)
		}
	}
	b := s.wait("b")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.acquire(ctx, b); err == nil {
		t.Fatal("acquire returned nil for a cancelled wait without a slot")
	}
	c := s.wait("c")
	s.release("a")
	if !granted(c) {
		t.Fatal("c not granted: the cancelled b still in line?")
	}
	if got := s.busy(); got != 3 {
		t.Fatalf("%d slots held, want 3", got)
	}
	// A waiter granted by the time its context ended gives the slot back.
	d := s.wait("d")
	s.release("a")
	if !granted(d) {
		t.Fatal("d not granted")
	}
	if err := s.acquire(ctx, d); err == nil {
		t.Fatal("acquire returned nil for a cancelled wait")
	}
	if got := s.busy(); got != 2 {
		t.Fatalf("%d slots held after d gave its slot back, want 2", got)
	}
	e := s.wait("e")
	if err := s.acquire(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	s.release("e")
	if got := s.busy(); got != 2 {
		t.Fatalf("%d slots held after e released, want 2", got)
	}
}

func TestSlotsPerNamespaceCap(t *testing.T) {
	s := newSlots(4, 2)
	a := []*slotWaiter{s.wait("a"), s.wait("a"), s.wait("a")}
	if !granted(a[0]) || !granted(a[1]) || granted(a[2]) {
		t.Fatalf("a alone with 4 free slots and a cap of 2: granted %v %v %v; want the first two", granted(a[0]), granted(a[1]), granted(a[2]))
	}
	if got := s.queued("a"); !strings.Contains(got, "--max-per-namespace") {
		t.Fatalf("queued message %q does not name the cap", got)
	}
	b := s.wait("b")
	if !granted(b) {
		t.Fatal("b not granted a free slot")
	}
	s.release("a")
	if !granted(a[2]) {
		t.Fatal("a[2] not granted once a was under its cap")
	}
}
