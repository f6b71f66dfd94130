package warmupstep

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/pkg/policy"
)

// hostileTemplates are the measured attacks on text/template request
// templates (issue 55): each hung the plugin, or grew its memory to GBs,
// for every tenant. Each must now be refused when the config is parsed.
var hostileTemplates = map[string]string{
	"/{{range 1000000000000}}{{end}}":                                        "range is refused",
	`/{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`:                 "define is refused",
	`/{{printf "%999999999d" 1}}`:                                            "printf is not a function here",
	"/{{randString 4000000000}}":                                             "randString: n: 4000000000 is outside 0..4096",
	"/{{urlquery (urlquery (pick \"" + strings.Repeat("&", 22000) + "\"))}}": "fails when rendered: urlquery returned 66000 bytes, over the cap of 65536",
	"/" + strings.Repeat("{{randString 4096}}", 17):                          "fails when rendered: renders to more than 65536 bytes",
}

// parseWithin parses raw in a goroutine and fails the test if no answer
// comes within 5 s: a regression to an unbounded template fails rather
// than hangs.
func parseWithin(t *testing.T, raw []byte) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := ParseStepConfig(raw, policy.Policy{})
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("no answer in 5 s: %.200s", raw)
		return nil
	}
}

func TestHostileTemplatesRefusedNamingTheField(t *testing.T) {
	for text, want := range hostileTemplates {
		for field, req := range map[string]map[string]any{
			"requests[0].path":                {"path": text},
			"requests[0].headers":             {"path": "/", "headers": map[string]string{"X-Id": text}}, // [X-Id] when parsed
			"requests[0].grpc.message":        {"grpc": map[string]any{"method": "a.B/C", "message": `{"id": "` + text + `"}`}},
			"requests[0].grpc.metadata[x-id]": {"grpc": map[string]any{"method": "a.B/C", "metadata": map[string]string{"x-id": text}}},
		} {
			raw, err := json.Marshal(map[string]any{"requests": []any{req}})
			if err != nil {
				t.Fatal(err)
			}
			if err := parseWithin(t, raw); err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s = %.80s: %.300v\nwant %s: … %s", field, text, err, field, want)
			}
		}
	}
	// and what users write today still parses
	for _, ok := range []string{"/api/search?q={{pick \"shoes\" \"coat\" | urlquery}}&page={{randInt 1 5}}", "/{{randString 4096}}", "/{{uuid}}/{{seq}}"} {
		raw, _ := json.Marshal(map[string]any{"requests": []any{map[string]string{"path": ok}}})
		if err := parseWithin(t, raw); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
}
