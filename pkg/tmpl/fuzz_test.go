package tmpl

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// FuzzTemplate: whatever a tenant writes, a template either is refused
// when parsed or renders within its budget: its output at most MaxOutput,
// the work its functions did at most MaxWork, the memory it allocated a
// small multiple of that, and no render over a second (a render is linear
// in the text, so even a 1 MiB text takes milliseconds).
func FuzzTemplate(f *testing.F) {
	for text := range hostile {
		f.Add(text)
	}
	for _, seed := range []string{
		"/api/users/{{randInt 1 5000}}?q={{pick \"a\" \"b\" | urlquery}}",
		`{"id": "{{randInt 1 20000}}", "tag": "{{randString 8}}", "n": {{seq}}}`,
		"a {{- /* c */ -}} b {{ pick `x` \"y\" | urlquery }}",
		strings.Repeat("{{randString 4096}}", 20),
		`{{urlquery (urlquery (urlquery (urlquery (urlquery (urlquery (urlquery (urlquery "&&&&&&&&"))))))))}}`,
		strings.Repeat("{{pick (randString 4096) (randString 4096) (randString 4096)}}", 30),
		"{{randString (randInt 0 4096) | urlquery | urlquery}}",
		"{{/.Missing}}{{.Missing}}",
	} {
		f.Add(seed)
	}
	o := Options[*counter]{Funcs: testFuncs()}
	f.Fuzz(func(t *testing.T, text string) {
		tp, err := Parse(text, o)
		if err != nil {
			return
		}
		for range 3 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			out, work, err := tp.render(nil, &counter{}, nil)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			switch {
			case took > time.Second:
				t.Fatalf("a render took %s: %q", took, text)
			case err == nil && len(out) > tp.maxOutput:
				t.Fatalf("rendered %d bytes, over the cap of %d: %q", len(out), tp.maxOutput, text)
			case work > tp.maxWork:
				t.Fatalf("the functions did %d bytes of work, over the budget of %d: %q", work, tp.maxWork, text)
			case allocated > uint64(16*tp.maxWork+64*len(text)+1<<20):
				t.Fatalf("a render allocated %d bytes (budget %d, text %d bytes): %q", allocated, tp.maxWork, len(text), text)
			}
		}
	})
}
