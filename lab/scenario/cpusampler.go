package scenario

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danki-dev/danki/lab/traffic"
)

// CPUSampler records how busy the whole machine's CPUs are, once a second
// (/proc/stat): the lab runs every pod, Envoy and the control plane on one
// machine, so a ratio in the gate bench means little without knowing
// whether the machine had CPU to spare in that minute.
type CPUSampler struct {
	mu      sync.Mutex
	samples []cpuSample
}

type cpuSample struct {
	at   time.Time
	busy float64 // share of all CPUs busy over the second before at, 0..1
}

// StartCPUSampler samples until ctx ends.
func StartCPUSampler(ctx context.Context) (*CPUSampler, error) {
	prev, err := readCPUTimes()
	if err != nil {
		return nil, err
	}
	c := &CPUSampler{}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				cur, err := readCPUTimes()
				if err != nil {
					continue
				}
				if busy, ok := busyShare(prev, cur); ok {
					c.mu.Lock()
					c.samples = append(c.samples, cpuSample{at: now, busy: busy})
					c.mu.Unlock()
				}
				prev = cur
			}
		}
	}()
	return c, nil
}

// Busy is the mean busy share per phase name over the seconds in any phase
// of that name (repeats pooled); names with no sample are left out.
func (c *CPUSampler) Busy(phases []traffic.Phase) map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum, n := map[string]float64{}, map[string]int{}
	for _, s := range c.samples {
		for _, p := range phases {
			if p.Contains(s.at) {
				sum[p.Name] += s.busy
				n[p.Name]++
			}
		}
	}
	out := map[string]float64{}
	for name, k := range n {
		out[name] = sum[name] / float64(k)
	}
	return out
}

// cpuTimes are /proc/stat's first line: total and idle (idle + iowait)
// jiffies since boot.
type cpuTimes struct{ total, idle uint64 }

func readCPUTimes() (cpuTimes, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, fmt.Errorf("machine CPU: %w", err)
	}
	return parseCPUTimes(string(raw))
}

func parseCPUTimes(stat string) (cpuTimes, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("machine CPU: /proc/stat starts %q, want the cpu line", line)
	}
	var t cpuTimes
	// user nice system idle iowait irq softirq steal (guest time is
	// already in user and nice).
	for i, v := range f[1:min(len(f), 9)] {
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("machine CPU: /proc/stat field %d %q: %w", i+1, v, err)
		}
		t.total += x
		if i == 3 || i == 4 {
			t.idle += x
		}
	}
	return t, nil
}

// busyShare is the busy share between two readings.
func busyShare(a, b cpuTimes) (float64, bool) {
	dt := float64(b.total) - float64(a.total)
	if dt <= 0 {
		return 0, false
	}
	return 1 - (float64(b.idle)-float64(a.idle))/dt, true
}
