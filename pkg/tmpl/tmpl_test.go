package tmpl

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"text/template"
	"time"
)

// counter is the test functions' state: what a caller's RNG or sequence
// is in pkg/warmup.
type counter struct{ n int64 }

const maxRandString = 4 << 10

// testFuncs mirror pkg/warmup's (which this package may not import):
// deterministic, so that renders compare with text/template's.
func testFuncs() []Func[*counter] {
	ints := func(names ...string) []Param {
		ps := make([]Param, len(names))
		for i, n := range names {
			ps[i] = Param{Name: n, Kind: KindInt}
		}
		return ps
	}
	return []Func[*counter]{
		{Name: "randInt", Params: ints("min", "max"), Call: func(_ *counter, a []Value) (Value, error) {
			if a[1].Int() < a[0].Int() {
				return Value{}, errors.New("max is below min")
			}
			return a[0], nil
		}},
		{Name: "randString", Params: []Param{{Name: "n", Kind: KindInt, Check: func(n int64) error {
			if n < 0 || n > maxRandString {
				return fmt.Errorf("%d is outside 0..%d", n, maxRandString)
			}
			return nil
		}}}, Call: func(_ *counter, a []Value) (Value, error) {
			return StringValue(strings.Repeat("x", int(a[0].Int()))), nil
		}},
		{Name: "pick", Params: []Param{{Name: "item"}}, Variadic: true, Call: func(_ *counter, a []Value) (Value, error) {
			if len(a) == 0 {
				return Value{}, errors.New("pick needs at least one argument")
			}
			return a[len(a)-1], nil
		}},
		{Name: "seq", Call: func(c *counter, _ []Value) (Value, error) { c.n++; return IntValue(c.n), nil }},
		URLQuery[*counter](),
	}
}

func parseTest(t testing.TB, text string) *Template[*counter] {
	t.Helper()
	tp, err := Parse(text, Options[*counter]{Funcs: testFuncs()})
	if err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	return tp
}

// textTemplateFuncs are testFuncs for text/template, for the differential
// test below.
func textTemplateFuncs(c *counter) template.FuncMap {
	return template.FuncMap{
		"randInt": func(lo, hi int) (int, error) {
			if hi < lo {
				return 0, errors.New("max is below min")
			}
			return lo, nil
		},
		"randString": func(n int) string { return strings.Repeat("x", n) },
		"pick": func(items ...any) (any, error) {
			if len(items) == 0 {
				return nil, errors.New("pick needs at least one argument")
			}
			return items[len(items)-1], nil
		},
		"seq": func() int64 { c.n++; return c.n },
	}
}

// TestRendersAsTextTemplate: what users write today (docs/, examples/,
// tests) renders exactly as text/template rendered it.
func TestRendersAsTextTemplate(t *testing.T) {
	for _, text := range []string{
		"/static/home",
		"/api/users/{{randInt 1 5000}}?q={{pick \"a\" \"b\" | urlquery}}",
		`/api/search?q={{pick "shoes" "coat" "lamp" "desk" | urlquery}}&page={{randInt 1 5}}`,
		`/search?q={{pick "a b" "c&d" | urlquery}}`,
		`{"id": "item-{{randInt 1 9}}", "n": "{{seq}}"}`,
		`{"id": {{randInt 1 9}}, "tag": "{{randString 8}}"}`,
		"/b/{{pick 1 2 3}}",
		"/{{randInt (randInt 0 1) 1}}",
		"{{seq}}-{{seq}}-{{pick seq seq}}",
		"{{ pick  \"a\"   `b` }}",
		"{{\"x\"}}{{`raw \\n`}}{{-42}}",
		"a  {{- \"b\" -}}  c",
		"a {{/* a comment */}} b {{- /* trimmed */ -}} c",
		"{{\"%zz\" | urlquery}}{{urlquery \"a b\" 1 2 \"c\"}}",
		"{{(pick \"a\" \"b\" | urlquery)}}",
		"line1\n{{randInt 3 4}}\nline3",
		"{{\"}}\"}}",
	} {
		tp := parseTest(t, text)
		got, err := tp.Render(&counter{}, nil)
		if err != nil {
			t.Errorf("%s: %v", text, err)
			continue
		}
		tt := template.Must(template.New("").Funcs(textTemplateFuncs(&counter{})).Parse(text))
		var want strings.Builder
		if err := tt.Execute(&want, nil); err != nil {
			t.Fatalf("text/template %s: %v", text, err)
		}
		if got != want.String() {
			t.Errorf("%s renders %q, text/template %q", text, got, want.String())
		}
	}
}

func TestDelimsAndFields(t *testing.T) {
	fields := []string{"Selector", "Window"}
	tp, err := Parse[struct{}](`rate(x{<<.Selector>>}[<<.Window>>]) {{not an action}}`, Options[struct{}]{Delims: Delims{"<<", ">>"}, Fields: fields})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tp.Render(struct{}{}, []string{`a="b"`, "5m"})
	if want := `rate(x{a="b"}[5m]) {{not an action}}`; err != nil || got != want {
		t.Errorf("rendered %q (%v), want %q", got, err, want)
	}
	if _, err := tp.Render(struct{}{}, []string{"only one"}); err == nil {
		t.Error("data not parallel to the fields rendered")
	}
	_, err = Parse[struct{}](`x{<<.Selecter>>}`, Options[struct{}]{Delims: Delims{"<<", ">>"}, Fields: fields})
	if err == nil || !strings.Contains(err.Error(), ".Selecter is not a field; the fields are .Selector .Window") {
		t.Errorf("unknown field: %v", err)
	}
	// Without declared fields a field fails when rendered (text/template
	// on nil data), so the caller's sample render names it.
	if _, err := parseTest(t, "/{{.Missing}}").Render(&counter{}, nil); err == nil || !strings.Contains(err.Error(), ".Missing") {
		t.Errorf("field of no data: %v", err)
	}
	if parseTest(t, "/static").HasActions() || !parseTest(t, "/{{seq}}").HasActions() {
		t.Error("HasActions")
	}
}

// hostile are the measured attacks on text/template (issue 55) and more
// of its language: each is refused when parsed.
var hostile = map[string]string{
	"/{{range 1000000000000}}{{end}}":                       "range is refused: templates have no loops",
	`{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`: "define is refused",
	`{{template "x"}}`:                                      "template is refused",
	`{{block "x" .}}{{end}}`:                                "block is refused",
	`{{printf "%999999999d" 1}}`:                            "printf is not a function here; the functions are: randInt, randString, pick, seq, urlquery",
	"{{randString 4000000000}}":                             "randString: n: 4000000000 is outside 0..4096",
	"{{randString -1}}":                                     "randString: n: -1 is outside",
	`{{if 1}}a{{end}}`:                                      "if is refused",
	`{{with "a"}}{{end}}`:                                   "with is refused",
	`{{$x := 1}}`:                                           "variables ($…) are refused",
	`{{.}}`:                                                 "the dot (.) is refused",
	`{{.A.B}}`:                                              "fields have no fields",
	`{{true}}`:                                              "true is refused",
	`{{1.5}}`:                                               "1.5 is not a decimal integer",
	`{{0x10}}`:                                              "0x10 is not a decimal integer",
	`{{99999999999999999999}}`:                              "is not a decimal integer",
	`{{'a'}}`:                                               "character constants are refused",
	`{{randInt 1}}`:                                         "randInt takes 2 arguments (min max), got 1",
	`{{randInt "1" 2}}`:                                     `randInt: min must be an integer, got "1"`,
	`{{seq 1}}`:                                             "seq takes no arguments, got 1",
	`{{"a" "b"}}`:                                           `"a" is not a function and takes no arguments`,
	`{{"a" | "b"}}`:                                         `"b" is not a function: a value can only be piped into a function`,
	`{{randInt 1 randInt}}`:                                 "randInt takes 2 arguments (min max): write (randInt …)",
	"{{}}":                                                  "empty action",
	"{{randInt 1 2":                                         "unclosed action",
	"{{(seq}}":                                              `unclosed "("`,
	"{{seq)}}":                                              `unexpected ")"`,
	"{{/* no end }}":                                        "unclosed comment",
	"{{/* x */ seq}}":                                       "a comment must end right before }}",
	`{{"abc}}`:                                              "unterminated string",
	`{{seq | }}`:                                            "missing command",
	"{{" + strings.Repeat("(", MaxDepth+2) + "seq" + strings.Repeat(")", MaxDepth+2) + "}}": "parentheses nest deeper than 16",
	`{{len "abc"}}`: "len is not a function here",
	`{{call .F}}`:   "call is not a function here",
}

func TestHostileTemplatesRefusedWhenParsed(t *testing.T) {
	for text, want := range hostile {
		done := make(chan error, 1)
		go func() {
			_, err := Parse(text, Options[*counter]{Funcs: testFuncs()})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want %q", text, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no answer in 5 s", text)
		}
	}
}

func TestErrorPosition(t *testing.T) {
	_, err := Parse("{\n  \"id\": {{range 3}}\n}", Options[*counter]{Funcs: testFuncs()})
	var perr *Error
	if !errors.As(err, &perr) || perr.Line != 2 || perr.Col != 11 {
		t.Errorf("error %v: want line 2, col 11", err)
	}
}

// TestBudget: every limit is a render error naming it, and a render that
// passes stays within them.
func TestBudget(t *testing.T) {
	small := Options[*counter]{Funcs: testFuncs(), MaxOutput: 100, MaxWork: 300}
	for text, want := range map[string]string{
		// the output: literal text and values
		strings.Repeat("{{randString 40}}", 3): "renders to more than 100 bytes, the cap on one rendered field",
		strings.Repeat("x", 101) + "{{seq}}":   "renders to more than 100 bytes",
		// a value over the cap, computed where the literal check cannot see it
		"{{randString (randInt 101 200)}}": "randString returned 101 bytes, over the cap of 100 on one value",
		// the work: values that never reach the output
		strings.Repeat("{{pick (randString 90) 1}}", 4): "the functions of one render returned more than 300 bytes, the work budget",
		// urlquery amplifies: "&" → "%26" → "%2526" …
		`{{urlquery (urlquery (urlquery (urlquery "&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&&")))}}`: "urlquery returned 120 bytes",
		// a computed argument is checked as a literal is
		"{{randString (pick -1)}}": "randString: n: -1 is outside",
		`{{randInt 1 (pick "a")}}`: `randInt: max must be an integer, got "a"`,
		"{{randInt 2 1}}":          "max is below min",
		"{{pick}}":                 "pick needs at least one argument",
	} {
		tp, err := Parse(text, small)
		if err != nil {
			t.Errorf("%s: parse: %v", text, err)
			continue
		}
		if out, err := tp.Render(&counter{}, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: rendered %d bytes (%v), want %q", text, len(out), err, want)
		}
	}
	tp, err := Parse(strings.Repeat("{{randString 20}}", 5), small)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tp.Render(&counter{}, nil); err != nil || len(out) != 100 {
		t.Errorf("exactly at the cap: %d bytes, %v", len(out), err)
	}
	// The defaults: 64 KiB a field, randString at most 4 KiB (the caller's
	// Check), so 16 of them fill a field and the 17th is refused.
	def := Options[*counter]{Funcs: testFuncs()}
	for n, ok := range map[int]bool{16: true, 17: false} {
		tp, err := Parse(strings.Repeat("{{randString 4096}}", n), def)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tp.Render(&counter{}, nil); (err == nil) != ok {
			t.Errorf("%d × randString 4096 under the default cap of %d: %v", n, DefaultMaxOutput, err)
		}
	}
}

// TestConcurrentRendersKeepTheirState: one template, one state per
// goroutine (a warm-up's connections).
func TestConcurrentRendersKeepTheirState(t *testing.T) {
	tp := parseTest(t, "{{seq}}")
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			c := &counter{}
			for i := 1; i <= 1000; i++ {
				if got, err := tp.Render(c, nil); err != nil || got != fmt.Sprint(i) {
					errs <- fmt.Errorf("render %d: %q %v", i, got, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
