package warmupstep

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/pkg/warmup"
)

// Job.Main replaces the synthetic load: no request goes to the targets,
// its summary is the converged message, After runs after it, its error
// fails the run, and Stop cancels it.
func TestSupervisorJobMain(t *testing.T) {
	find := func(context.Context) ([]warmup.Target, []warmup.Target, error) {
		return []warmup.Target{{URL: "http://127.0.0.1:1/never-called"}}, nil, nil
	}
	s := newTestSupervisor()
	ok := RunKey{Owner: "shop/a", Revision: "h1"}
	s.Start(ok, nil, Job{Config: fastConfig(), FindTargets: find,
		Main: func(_ context.Context, canary []warmup.Target, report func(string)) (string, error) {
			report("mirroring 1%")
			return "warm on mirrored traffic", nil
		},
		After: func(context.Context, []warmup.Target, func(string)) (string, error) { return "capacity ok", nil },
	})
	if st := waitFinal(t, s, ok, 10*time.Second); st.Phase != PhaseConverged || st.Message != "warm on mirrored traffic; capacity ok" {
		t.Fatalf("status %s %q", st.Phase, st.Message)
	}

	bad := RunKey{Owner: "shop/b", Revision: "h1"}
	s.Start(bad, nil, Job{Config: fastConfig(), FindTargets: find,
		Main: func(context.Context, []warmup.Target, func(string)) (string, error) {
			return "", errors.New("mirror: no traffic")
		},
	})
	if st := waitFinal(t, s, bad, 10*time.Second); st.Phase != PhaseFailed || !strings.Contains(st.Message, "no traffic") {
		t.Fatalf("status %s %q", st.Phase, st.Message)
	}

	stop := RunKey{Owner: "shop/c", Revision: "h1"}
	ended := make(chan struct{})
	s.Start(stop, nil, Job{Config: fastConfig(), FindTargets: find,
		Main: func(ctx context.Context, _ []warmup.Target, _ func(string)) (string, error) {
			<-ctx.Done()
			close(ended)
			return "", ctx.Err()
		},
	})
	if n := s.Stop("shop/c"); n != 1 {
		t.Fatalf("Stop stopped %d runs", n)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("Main's context was not cancelled by Stop")
	}
}
