package tmpl

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"text/template"
)

// benchPath is a typical warm-up path: every request renders one.
const benchPath = `/api/users/{{randInt 1 5000}}?q={{pick "a" "b" | urlquery}}`

type benchState struct{ rng *rand.Rand }

// BenchmarkPathRender renders benchPath with this package and, side by
// side, with text/template as pkg/warmup did before it (a clone bound to
// the generator's RNG, Execute into a reused buffer, the string copied
// out): the hot path of every warm-up request.
func BenchmarkPathRender(b *testing.B) {
	b.Run("tmpl", func(b *testing.B) {
		funcs := []Func[*benchState]{
			{Name: "randInt", Params: []Param{{Name: "min", Kind: KindInt}, {Name: "max", Kind: KindInt}}, Call: func(s *benchState, a []Value) (Value, error) {
				return IntValue(a[0].Int() + s.rng.Int64N(a[1].Int()-a[0].Int()+1)), nil
			}},
			{Name: "pick", Params: []Param{{Name: "item"}}, Variadic: true, Call: func(s *benchState, a []Value) (Value, error) {
				return a[s.rng.IntN(len(a))], nil
			}},
			URLQuery[*benchState](),
		}
		tp, err := Parse(benchPath, Options[*benchState]{Funcs: funcs})
		if err != nil {
			b.Fatal(err)
		}
		state := &benchState{rng: rand.New(rand.NewPCG(1, 2))}
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			if buf, err = tp.AppendRender(buf[:0], state, nil); err != nil {
				b.Fatal(err)
			}
			_ = string(buf)
		}
	})
	b.Run("text/template", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		tt := template.Must(template.New("path").Funcs(template.FuncMap{
			"randInt": func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) },
			"pick":    func(items ...any) any { return items[rng.IntN(len(items))] },
		}).Option("missingkey=error").Parse(benchPath))
		var buf bytes.Buffer
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			if err := tt.Execute(&buf, nil); err != nil {
				b.Fatal(err)
			}
			_ = buf.String()
		}
	})
}
