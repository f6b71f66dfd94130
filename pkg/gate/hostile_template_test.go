package gate

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/pkg/policy"
)

// TestHostileAnnotationTemplatesRefused: a pod's danki.dev/warm-up
// annotation is any tenant's config, read by the one gate of a cluster; a
// request template that would hang it or exhaust its memory (issue 55)
// is refused when the annotation is parsed, naming the field.
func TestHostileAnnotationTemplatesRefused(t *testing.T) {
	for text, want := range map[string]string{
		"/{{range 1000000000000}}{{end}}":                        "range is refused",
		`/{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`: "define is refused",
		`/{{printf "%999999999d" 1}}`:                            "printf is not a function here",
		"/{{randString 4000000000}}":                             "randString: n: 4000000000 is outside 0..4096",
		"/" + strings.Repeat("{{randString 4096}}", 17):          "fails when rendered: renders to more than 65536 bytes",
	} {
		raw, err := json.Marshal(map[string]any{"requests": []any{map[string]string{"path": text}}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := ParseConfig(string(raw), policy.Policy{})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "requests[0].path: ") || !strings.Contains(err.Error(), want) {
				t.Errorf("%.80s: %.300v, want requests[0].path: … %s", text, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%.80s: no answer in 5 s", text)
		}
	}
}
