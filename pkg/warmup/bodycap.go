package warmup

import (
	"io"
	"net/http"
)

// MaxResponseBodyBytes is how much of a warm-up response's body is read:
// the load reads it only to free the connection, and a canary (the
// tenant's code) that answers with an endless body would otherwise keep
// the plugin reading — every tenant's rollouts share its CPU and network.
// A longer body is cut there: the request still counts, with its own
// status and the latency to the cut, and its connection is closed rather
// than drained (the next request dials anew).
const MaxResponseBodyBytes = 64 << 10

// bodyCap is the RoundTripper outside a load connection's own
// (requestRewriter): every response body it returns ends after
// MaxResponseBodyBytes.
type bodyCap struct{ base http.RoundTripper }

func (b bodyCap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = &cappedBody{body: resp.Body, left: MaxResponseBodyBytes}
	}
	return resp, err
}

// cappedBody reads body up to left bytes, then reports the end (io.EOF,
// so fortio records the answer's status rather than a read error) and
// closes body: net/http then closes the connection instead of reading the
// rest of the answer to reuse it.
type cappedBody struct {
	body io.ReadCloser
	left int64
	cut  bool
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.cut {
		return 0, io.EOF
	}
	if c.left <= 0 {
		// One byte more tells a body of exactly the cap, whose connection
		// is kept, from a longer one.
		var one [1]byte
		n, err := io.ReadFull(c.body, one[:])
		if n == 0 && err != nil {
			return 0, err
		}
		c.cut = true
		c.body.Close()
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.body.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *cappedBody) Close() error {
	if c.cut {
		return nil
	}
	c.cut = true
	return c.body.Close()
}
