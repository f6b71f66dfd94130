package warmup

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"golang.org/x/net/http/httpguts"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/tmpl"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// RequestSpec is one entry of the warm-up request mix. Path, header values
// and Body are templates (pkg/tmpl: text/template's syntax without loops,
// conditions or nested templates) rendered per request with these
// functions (arguments in brackets):
//
//	randInt [min max]   a random integer in [min, max]
//	randString [n]      n random characters from [a-z0-9], n at most 4096
//	pick [a b …]        one of its arguments, uniformly
//	uuid                a random version-4 UUID
//	seq                 1, 2, 3, … per target (shared by its connections)
//	urlquery [s]        s escaped for a URL query
//
// Each rendered field is at most 64 KiB; a template that does not render
// within that budget is refused when the config is checked (docs/warmup.md,
// "Request templates"). Example:
// "/api/users/{{randInt 1 5000}}?q={{pick \"a\" \"b\" | urlquery}}".
type RequestSpec struct {
	// Name labels the request in errors. Optional.
	Name string `json:"name,omitempty"`
	// Method is the HTTP method. Default GET. Methods other than GET, HEAD and
	// OPTIONS need Config.AllowSideEffects.
	Method string `json:"method,omitempty"`
	// Path is the request path with optional query; it must start with "/".
	Path string `json:"path"`
	// Headers are extra request headers; values are templates. "Host" sets
	// the Host header.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the request body template. When set without a Content-Type
	// header, Content-Type is application/json if the body starts with "{"
	// or "[", else application/octet-stream.
	Body string `json:"body,omitempty"`
	// GRPC, if set, makes this entry a gRPC call instead of an HTTP
	// request (leave method, path, headers and body unset then).
	GRPC *GRPCRequest `json:"grpc,omitempty"`
	// Weight is the relative frequency of this request in the mix. Default 1.
	Weight int `json:"weight,omitempty"`
}

// validate checks one defaulted request; error paths are relative to it
// ("method", "path").
func (r RequestSpec) validate(allowSideEffects bool, delims Delims) error {
	var errs config.Errors
	if r.GRPC != nil {
		if r.Method != "" || r.Path != "" || len(r.Headers) > 0 || r.Body != "" {
			errs.Addf("grpc", "a request is either HTTP (method, path, headers, body) or a gRPC call (grpc), not both: remove the HTTP fields or make it two requests")
		}
		if r.Weight < 0 {
			errs.Addf("weight", "must not be negative (got %d); remove the request to leave it out", r.Weight)
		}
		errs.Add("", r.GRPC.validate(delims))
		if c, err := compileRequest(r, delims); err == nil {
			_, err = c.sample()
			errs.Add("", err)
		}
		return errs.Err()
	}
	if !httpguts.ValidHeaderFieldName(r.Method) { // a method is an RFC 9110 token, like a header name
		errs.Addf("method", "%q is not a valid HTTP method", r.Method)
	} else if !safeMethods[r.Method] && !allowSideEffects {
		errs.Addf("method", "%s may change data on the canary; warm-up only sends GET, HEAD and OPTIONS unless allowSideEffects is true "+
			"(set it only if the application keeps requests marked with the marker header free of side effects)", r.Method)
	}
	if !strings.HasPrefix(r.Path, "/") {
		errs.Addf("path", "%q must start with / (the target gives scheme, host and port)", r.Path)
	}
	if r.Weight < 0 {
		errs.Addf("weight", "must not be negative (got %d); remove the request to leave it out", r.Weight)
	}
	for name := range r.Headers {
		if !httpguts.ValidHeaderFieldName(name) {
			errs.Addf("headers", "%q is not a valid HTTP header name", name)
		}
	}
	path := r.Path
	if c, err := compileRequest(r, delims); err != nil {
		errs.Add("", err)
	} else if g, err := c.sample(); err != nil {
		errs.Add("", err)
	} else {
		path = g.path
	}
	if !allowSideEffects {
		r.checkSideEffects(path, &errs)
	}
	return errs.Err()
}

// sample renders the request once, as a run would (the same functions, a
// fixed seed, seq from 1), so a template that only fails when executed —
// randInt 5 1, a field of the empty data, a rendered path that is no path —
// is a config error, not a run whose every request fails. Error paths are
// relative to the request, like compileRequest's.
func (c *compiledRequest) sample() (generatedRequest, error) {
	set := &requestSet{requests: []*compiledRequest{c}, cumul: []int{1}, marker: wellknown.MarkerHeader}
	g := set.newGenerator(1, 2, &atomic.Int64{})
	t := g.templates[0]
	if c.grpc != nil {
		var errs config.Errors
		text, err := g.render(t.message, c.grpc.spec.message())
		switch {
		case err != nil:
			errs.Add("grpc.message", fmt.Errorf("fails when rendered: %w", err))
		case !json.Valid([]byte(text)):
			errs.Addf("grpc.message", "renders to %q, which is not JSON: write the request message in protobuf's JSON mapping", text)
		}
		for j, k := range c.grpc.metadataKeys {
			if _, err := g.render(t.metadata[j], c.grpc.metadataText[j]); err != nil {
				errs.Add(fmt.Sprintf("grpc.metadata[%s]", k), fmt.Errorf("fails when rendered: %w", err))
			}
		}
		return generatedRequest{}, errs.Err()
	}
	var errs config.Errors
	out, err := g.next()
	if err != nil {
		// next stops at the first failing template: say which one.
		field := "path"
		if _, perr := g.render(t.path, c.spec.Path); perr == nil {
			field = "body"
			if _, berr := g.render(t.body, c.spec.Body); berr == nil {
				field = "headers"
			}
		}
		errs.Add(field, fmt.Errorf("fails when rendered: %w", err))
		return out, errs.Err()
	}
	if _, err := url.ParseRequestURI(out.path); err != nil || !strings.HasPrefix(out.path, "/") {
		errs.Addf("path", "renders to %q, which is not a path starting with /", out.path)
	}
	return out, errs.Err()
}

// compiledRequest is a RequestSpec with its templates parsed. A nil template
// means the text is static.
type compiledRequest struct {
	spec        RequestSpec
	path, body  *requestTemplate
	headerNames []string
	headers     []*requestTemplate // parallel to headerNames; nil = static
	contentType string             // default Content-Type for a body
	grpc        *compiledGRPC      // set for a gRPC call
}

// maxRandString caps randString's n: a few KiB is more random text than
// any request needs, and keeps one call far below a rendered field's cap
// (tmpl.DefaultMaxOutput).
const maxRandString = 4 << 10

// templateState is what the template functions draw from: a generator's
// RNG and its target's sequence. Parsing never calls them.
type templateState struct {
	rng *rand.Rand
	seq *atomic.Int64
}

func intParams(names ...string) []tmpl.Param {
	ps := make([]tmpl.Param, len(names))
	for i, n := range names {
		ps[i] = tmpl.Param{Name: n, Kind: tmpl.KindInt}
	}
	return ps
}

// templateFuncs are the request templates' functions (RequestSpec), plus
// urlquery, the one text/template built-in users write.
var templateFuncs = []tmpl.Func[*templateState]{
	{Name: "randInt", Params: intParams("min", "max"), Call: func(s *templateState, a []tmpl.Value) (tmpl.Value, error) {
		lo, hi := a[0].Int(), a[1].Int()
		if hi < lo {
			return tmpl.Value{}, fmt.Errorf("randInt %d %d: max is below min", lo, hi)
		}
		// In uint64, so that a span of the whole int64 range does not
		// overflow (Int64N panics on a non-positive n).
		span := uint64(hi) - uint64(lo)
		r := s.rng.Uint64()
		if span != math.MaxUint64 {
			r = s.rng.Uint64N(span + 1)
		}
		return tmpl.IntValue(int64(uint64(lo) + r)), nil
	}},
	{Name: "randString", Params: []tmpl.Param{{Name: "n", Kind: tmpl.KindInt, Check: func(n int64) error {
		if n < 0 || n > maxRandString {
			return fmt.Errorf("%d is outside 0..%d (random text is capped at 4 KiB)", n, maxRandString)
		}
		return nil
	}}}, Call: func(s *templateState, a []tmpl.Value) (tmpl.Value, error) {
		const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
		b := make([]byte, a[0].Int())
		for i := range b {
			b[i] = letters[s.rng.IntN(len(letters))]
		}
		return tmpl.StringValue(string(b)), nil
	}},
	{Name: "pick", Params: []tmpl.Param{{Name: "item"}}, Variadic: true, Call: func(s *templateState, a []tmpl.Value) (tmpl.Value, error) {
		if len(a) == 0 {
			return tmpl.Value{}, errors.New("pick needs at least one argument")
		}
		return a[s.rng.IntN(len(a))], nil
	}},
	{Name: "uuid", Call: func(s *templateState, _ []tmpl.Value) (tmpl.Value, error) {
		var u uuid.UUID
		binary.LittleEndian.PutUint64(u[:8], s.rng.Uint64())
		binary.LittleEndian.PutUint64(u[8:], s.rng.Uint64())
		u[6] = u[6]&0x0f | 0x40 // version 4
		u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
		return tmpl.StringValue(u.String()), nil
	}},
	{Name: "seq", Call: func(s *templateState, _ []tmpl.Value) (tmpl.Value, error) {
		return tmpl.IntValue(s.seq.Add(1)), nil
	}},
	tmpl.URLQuery[*templateState](),
}

// requestTemplate is a parsed request template (pkg/tmpl).
type requestTemplate = tmpl.Template[*templateState]

// Delims are the template delimiters of request templates. The zero value
// means {{ and }}. Argo Rollouts resolves every {{…}} in an
// AnalysisTemplate's metric itself (and fails on the ones it does not know),
// so danki/latency's load source writes templates with << and >>.
type Delims struct{ Left, Right string }

func (d Delims) orDefault() Delims {
	if d.Left == "" || d.Right == "" {
		return Delims{"{{", "}}"}
	}
	return d
}

// parseTemplate parses one request template; nil means the text is static.
// Parsing refuses what could make a render unbounded (pkg/tmpl); the
// budget of a render itself is checked by sample.
func parseTemplate(name, text string, delims Delims) (*requestTemplate, error) {
	delims = delims.orDefault()
	if !strings.Contains(text, delims.Left) {
		return nil, nil
	}
	t, err := tmpl.Parse(text, tmpl.Options[*templateState]{Delims: tmpl.Delims(delims), Funcs: templateFuncs})
	if err != nil {
		return nil, &config.FieldError{Path: name, Err: err}
	}
	return t, nil
}

// compileRequest parses the request's templates; error paths are relative
// to the request ("path", "headers[X-Id]").
func compileRequest(r RequestSpec, delims Delims) (*compiledRequest, error) {
	c := &compiledRequest{spec: r}
	if r.GRPC != nil {
		var err error
		c.grpc, err = compileGRPC(*r.GRPC, delims)
		return c, err
	}
	var errs []error
	var err error
	if c.path, err = parseTemplate("path", r.Path, delims); err != nil {
		errs = append(errs, err)
	}
	if c.body, err = parseTemplate("body", r.Body, delims); err != nil {
		errs = append(errs, err)
	}
	// Sorted, so a fixed seed draws random fields in the same order each run.
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		t, err := parseTemplate(fmt.Sprintf("headers[%s]", name), r.Headers[name], delims)
		if err != nil {
			errs = append(errs, err)
		}
		c.headerNames = append(c.headerNames, name)
		c.headers = append(c.headers, t)
	}
	if r.Body != "" {
		c.contentType = "application/octet-stream"
		if t := strings.TrimSpace(r.Body); strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
			c.contentType = "application/json"
		}
	}
	return c, errors.Join(errs...)
}

// requestSet is the compiled, immutable request mix shared by all
// connections of a run.
type requestSet struct {
	requests []*compiledRequest
	cumul    []int // cumulative weights, for the weighted pick
	marker   string
	// grpc holds the gRPC calls' methods, once resolved (resolveGRPC):
	// parallel to requests; nil for an HTTP mix.
	grpc []*grpcMethod
}

func newRequestSet(cfg Config) (*requestSet, error) {
	s := &requestSet{marker: http.CanonicalHeaderKey(cfg.MarkerHeader)}
	total := 0
	for i, r := range cfg.Requests {
		c, err := compileRequest(r, cfg.TemplateDelims)
		if err != nil {
			var errs config.Errors
			errs.Add(fmt.Sprintf("requests[%d]", i), err)
			return nil, errs.Err()
		}
		w := max(r.Weight, 1)
		total += w
		s.requests = append(s.requests, c)
		s.cumul = append(s.cumul, total)
	}
	if len(s.requests) == 0 {
		return nil, errors.New("requests: no request to send")
	}
	return s, nil
}

// generatedRequest is one concrete request drawn from the mix.
type generatedRequest struct {
	method string
	path   string // path and optional query
	header http.Header
	host   string
	body   []byte
}

// generator draws requests from a requestSet. It is owned by one connection
// and not safe for concurrent use; the templates are shared, rendered with
// its own RNG (state) so that a fixed seed gives a reproducible stream per
// connection.
type generator struct {
	set       *requestSet
	rng       *rand.Rand
	state     *templateState
	templates []generatorTemplates
	buf       []byte
}

type generatorTemplates struct {
	path, body *requestTemplate
	headers    []*requestTemplate
	// message and metadata of a gRPC call (parallel to its metadataKeys)
	message  *requestTemplate
	metadata []*requestTemplate
}

func (s *requestSet) newGenerator(seed1, seed2 uint64, seq *atomic.Int64) *generator {
	g := &generator{set: s, rng: rand.New(rand.NewPCG(seed1, seed2))}
	g.state = &templateState{rng: g.rng, seq: seq}
	for _, r := range s.requests {
		gt := generatorTemplates{path: r.path, body: r.body, headers: r.headers}
		if r.grpc != nil {
			gt.message, gt.metadata = r.grpc.message, r.grpc.metadata
		}
		g.templates = append(g.templates, gt)
	}
	return g
}

// render renders t, or returns static when t is nil (a text without
// actions).
func (g *generator) render(t *requestTemplate, static string) (string, error) {
	if t == nil {
		return static, nil
	}
	var err error
	if g.buf, err = t.AppendRender(g.buf[:0], g.state, nil); err != nil {
		return "", err
	}
	return string(g.buf), nil
}

// pick draws the index of the next request by weight.
func (g *generator) pick() int {
	i := 0
	if n := len(g.set.requests); n > 1 {
		x := g.rng.IntN(g.set.cumul[n-1])
		for g.set.cumul[i] <= x {
			i++
		}
	}
	return i
}

// next draws and renders one request.
func (g *generator) next() (generatedRequest, error) {
	i := g.pick()
	r, t := g.set.requests[i], g.templates[i]
	out := generatedRequest{method: r.spec.Method, header: make(http.Header, len(r.headerNames)+2)}
	var err error
	if out.path, err = g.render(t.path, r.spec.Path); err != nil {
		return out, err
	}
	if r.spec.Body != "" {
		body, err := g.render(t.body, r.spec.Body)
		if err != nil {
			return out, err
		}
		out.body = []byte(body)
		out.header.Set("Content-Type", r.contentType)
	}
	for j, name := range r.headerNames {
		v, err := g.render(t.headers[j], r.spec.Headers[name])
		if err != nil {
			return out, err
		}
		if strings.EqualFold(name, "Host") {
			out.host = v
			continue
		}
		out.header.Set(name, v)
	}
	out.header.Set(g.set.marker, "1")
	return out, nil
}

// requestRewriter is the http.RoundTripper danki installs under a fortio std
// client (fhttp.HTTPOptions.Transport): fortio builds one fixed request per
// connection, and the rewriter turns each into the next request of the mix,
// with the marker header, before it goes on the wire. One rewriter per
// connection, so its generator is never used concurrently.
type requestRewriter struct {
	base    http.RoundTripper
	gen     *generator
	lastErr *errorBox
	// renderFails counts the target's requests that failed before they
	// were sent (a template that failed to render): a run where every
	// request did fails (coordinator.run).
	renderFails *atomic.Int64
	// explain says what a failure means in the mesh (a STRICT sidecar's
	// reset, an AuthorizationPolicy's denial).
	explain explainer
}

func (rw *requestRewriter) RoundTrip(req *http.Request) (*http.Response, error) {
	g, err := rw.gen.next()
	if err != nil {
		err = fmt.Errorf("render request template: %w", err)
		rw.lastErr.set(err)
		rw.renderFails.Add(1)
		return nil, err
	}
	out := req.Clone(req.Context())
	out.Method = g.method
	u, err := url.ParseRequestURI(g.path)
	if err != nil {
		err = fmt.Errorf("rendered path %q: %w", g.path, err)
		rw.lastErr.set(err)
		rw.renderFails.Add(1)
		return nil, err
	}
	out.URL.Path, out.URL.RawPath, out.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
	for k, v := range g.header {
		out.Header[k] = v
	}
	if g.host != "" {
		out.Host = g.host
	}
	if g.body != nil {
		body := g.body
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		out.ContentLength = int64(len(body))
	} else {
		out.Body, out.GetBody, out.ContentLength = nil, nil, 0
	}
	resp, err := rw.base.RoundTrip(out)
	if err != nil {
		rw.lastErr.set(rw.explain.transport(err))
		return resp, err
	}
	if denied := rw.explain.http(resp); denied != nil {
		rw.lastErr.set(denied)
	}
	return resp, nil
}

// errorBox keeps the last request error of a target for failure messages.
type errorBox struct {
	mu  sync.Mutex
	err error
}

func (b *errorBox) set(err error) {
	b.mu.Lock()
	b.err = err
	b.mu.Unlock()
}

func (b *errorBox) get() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
