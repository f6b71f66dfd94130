package traffic

import (
	"net/http"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
)

// statusFirstOnConn is the status the test server answers the first request
// on each connection with (2xx, so it counts as OK): it lets a test find
// exactly those requests among the client's samples.
const statusFirstOnConn = http.StatusNonAuthoritativeInfo // 203

// startTestServer starts a server on 127.0.0.1 that counts what it served.
// The first request on each connection waits firstDelay more and answers
// statusFirstOnConn, like a cold service; every request waits delay.
func startTestServer(tb testing.TB, firstDelay, delay time.Duration) *testutil.ColdServer {
	tb.Helper()
	s := testutil.NewColdServer(tb, func(_ int64, first bool) time.Duration {
		if first {
			return delay + firstDelay
		}
		return delay
	})
	s.FirstOnConnStatus = statusFirstOnConn
	return s
}
