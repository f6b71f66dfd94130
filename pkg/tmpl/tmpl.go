package tmpl

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The budget of one render (Options.MaxOutput, Options.MaxWork).
const (
	// DefaultMaxOutput is the cap on one rendered field and on any value a
	// function returns: far above any real path, header or request body a
	// warm-up sends, far below what hurts a process that serves a cluster.
	DefaultMaxOutput = 64 << 10
	// workPerOutput is MaxWork's default as a multiple of MaxOutput: room for
	// intermediate values (a randString escaped by urlquery) without letting
	// a chain of them amplify.
	workPerOutput = 4
	// MaxDepth is how deeply parenthesised pipelines may nest; it keeps the
	// parser's and the renderer's recursion shallow whatever the text.
	MaxDepth = 16
)

// Delims are a template's action delimiters; the zero value means {{ and }}.
type Delims struct{ Left, Right string }

func (d Delims) orDefault() Delims {
	if d.Left == "" || d.Right == "" {
		return Delims{"{{", "}}"}
	}
	return d
}

// Kind is what a function's parameter accepts.
type Kind uint8

const (
	// KindAny accepts a string or an integer.
	KindAny Kind = iota
	// KindInt accepts an integer only.
	KindInt
)

// Param is one parameter of a Func.
type Param struct {
	// Name is the parameter's name in error messages ("n", "min").
	Name string
	Kind Kind
	// Check, for a KindInt parameter, refuses an out-of-range value: a
	// literal argument when the template is parsed, a computed one when it
	// is rendered. Nil: any integer.
	Check func(n int64) error
}

// Func is a function templates may call. The engine checks the number of
// arguments (when parsing) and their kinds and Checks before Call runs, so
// Call may rely on them.
type Func[S any] struct {
	Name   string
	Params []Param
	// Variadic lets the last parameter repeat any number of times, none
	// included (pick "a" "b" "c"; pick alone is Call's to refuse).
	Variadic bool
	// Call computes the result; it must not keep args. Its error fails the
	// render.
	Call func(state S, args []Value) (Value, error)
}

// Value is a string or an integer.
type Value struct {
	s     string
	n     int64
	isInt bool
}

// StringValue is a string value.
func StringValue(s string) Value { return Value{s: s} }

// IntValue is an integer value.
func IntValue(n int64) Value { return Value{n: n, isInt: true} }

// IsInt reports whether v is an integer.
func (v Value) IsInt() bool { return v.isInt }

// Int is v's integer (0 for a string; a KindInt parameter always has one).
func (v Value) Int() int64 { return v.n }

// String is v as text: a string as it is, an integer in decimal.
func (v Value) String() string {
	if v.isInt {
		return strconv.FormatInt(v.n, 10)
	}
	return v.s
}

// size is what v counts against the work budget: its text's length, and at
// least one byte, so that a call producing nothing still costs.
func (v Value) size() int {
	if v.isInt {
		return 8
	}
	return max(len(v.s), 1)
}

func (v Value) appendTo(b []byte) []byte {
	if v.isInt {
		return strconv.AppendInt(b, v.n, 10)
	}
	return append(b, v.s...)
}

// URLQuery is text/template's urlquery: its arguments' text, escaped for a
// URL query (url.QueryEscape). Several arguments are joined as fmt.Sprint
// joins them, as text/template does.
func URLQuery[S any]() Func[S] {
	return Func[S]{Name: "urlquery", Params: []Param{{Name: "value"}}, Variadic: true,
		Call: func(_ S, args []Value) (Value, error) {
			if len(args) == 1 {
				return StringValue(url.QueryEscape(args[0].String())), nil
			}
			parts := make([]any, len(args))
			for i, a := range args {
				if a.isInt {
					parts[i] = a.n
				} else {
					parts[i] = a.s
				}
			}
			return StringValue(url.QueryEscape(fmt.Sprint(parts...))), nil
		}}
}

// Options are what a template may use and its budget.
type Options[S any] struct {
	Delims Delims
	// Funcs are the functions a template may call.
	Funcs []Func[S]
	// Fields are the data fields a template may name (.Selector); the data
	// given to Render is parallel to them. Without Fields a template has no
	// data: a field then parses but fails when rendered, as text/template
	// fails on nil data, so that a caller's sample render reports it.
	Fields []string
	// MaxOutput caps the rendered text and every value a function returns,
	// in bytes; 0 means DefaultMaxOutput.
	MaxOutput int
	// MaxWork caps all values functions return in one render, in bytes;
	// 0 means 4 × MaxOutput.
	MaxWork int
}

// Template is a parsed template; it is immutable and safe for concurrent
// renders.
type Template[S any] struct {
	nodes     []node
	funcs     []Func[S]
	fields    []string
	maxOutput int
	maxWork   int
}

// node is literal text or an action.
type node struct {
	text string
	pipe *pipeline // nil: text
}

type pipeline struct {
	cmds []command
}

// command is a call of funcs[fn] with args (and the piped value, if any),
// or, with fn < 0, the single operand args[0].
type command struct {
	fn   int
	args []operand
	pos  int
}

type operandKind uint8

const (
	opValue operandKind = iota // a literal
	opField
	opPipe
)

type operand struct {
	kind  operandKind
	val   Value
	field int    // index into Fields; -1: the template has no such field
	name  string // the field's name
	pipe  *pipeline
}

// HasActions reports whether the template has any action (a text-only
// template renders to its text).
func (t *Template[S]) HasActions() bool {
	for _, n := range t.nodes {
		if n.pipe != nil {
			return true
		}
	}
	return false
}

// MaxOutput is the cap on the rendered text, in bytes.
func (t *Template[S]) MaxOutput() int { return t.maxOutput }

// Render renders the template with the caller's state (passed to every
// function) and the data, parallel to Options.Fields.
func (t *Template[S]) Render(state S, data []string) (string, error) {
	out, _, err := t.render(nil, state, data)
	return string(out), err
}

// AppendRender appends the rendered text to dst: Render without a copy
// for a caller that reuses its buffer. On error dst's content past its
// original length is undefined.
func (t *Template[S]) AppendRender(dst []byte, state S, data []string) ([]byte, error) {
	out, _, err := t.render(dst, state, data)
	return out, err
}

// render returns the text and the work done (what functions returned, in
// bytes), which the fuzz target holds to the budget.
func (t *Template[S]) render(dst []byte, state S, data []string) ([]byte, int, error) {
	if len(data) != len(t.fields) {
		return dst, 0, fmt.Errorf("tmpl: %d data values for %d fields", len(data), len(t.fields))
	}
	r := renderer[S]{t: t, state: state, data: data, out: dst, start: len(dst)}
	for i := range t.nodes {
		n := &t.nodes[i]
		if n.pipe == nil {
			r.out = append(r.out, n.text...)
		} else {
			v, err := r.pipeline(n.pipe)
			if err != nil {
				return r.out, r.work, err
			}
			// Checked before the append: a value is at most MaxOutput, so
			// the buffer never holds more than twice the cap.
			if len(r.out)-r.start+len(v.s) > t.maxOutput {
				return r.out, r.work, r.overOutput()
			}
			r.out = v.appendTo(r.out)
		}
		if len(r.out)-r.start > t.maxOutput {
			return r.out, r.work, r.overOutput()
		}
	}
	return r.out, r.work, nil
}

type renderer[S any] struct {
	t     *Template[S]
	state S
	data  []string
	out   []byte
	start int
	work  int
	args  []Value // a stack: each call's arguments above its caller's
}

func (r *renderer[S]) overOutput() error {
	return fmt.Errorf("renders to more than %d bytes, the cap on one rendered field", r.t.maxOutput)
}

func (r *renderer[S]) pipeline(p *pipeline) (Value, error) {
	var v Value
	for i := range p.cmds {
		var err error
		if v, err = r.command(&p.cmds[i], v, i > 0); err != nil {
			return Value{}, err
		}
	}
	return v, nil
}

func (r *renderer[S]) command(c *command, piped Value, hasPiped bool) (Value, error) {
	if c.fn < 0 {
		return r.operand(&c.args[0])
	}
	f := &r.t.funcs[c.fn]
	base := len(r.args)
	defer func() { r.args = r.args[:base] }()
	for i := range c.args {
		v, err := r.operand(&c.args[i])
		if err != nil {
			return Value{}, err
		}
		r.args = append(r.args, v)
	}
	if hasPiped {
		r.args = append(r.args, piped)
	}
	args := r.args[base:]
	for i, a := range args {
		p := f.param(i)
		if p.Kind != KindInt {
			continue
		}
		if !a.isInt {
			return Value{}, fmt.Errorf("%s: %s must be an integer, got %q", f.Name, p.Name, a.s)
		}
		if p.Check != nil {
			if err := p.Check(a.n); err != nil {
				return Value{}, fmt.Errorf("%s: %s: %w", f.Name, p.Name, err)
			}
		}
	}
	v, err := f.Call(r.state, args)
	if err != nil {
		return Value{}, err
	}
	size := v.size()
	if size > r.t.maxOutput {
		return Value{}, fmt.Errorf("%s returned %d bytes, over the cap of %d on one value", f.Name, size, r.t.maxOutput)
	}
	if r.work+size > r.t.maxWork {
		return Value{}, fmt.Errorf("%s: the functions of one render returned more than %d bytes, the work budget of one rendered field", f.Name, r.t.maxWork)
	}
	r.work += size
	return v, nil
}

func (r *renderer[S]) operand(o *operand) (Value, error) {
	switch o.kind {
	case opField:
		if o.field < 0 {
			return Value{}, fmt.Errorf(".%s: this template has no data fields", o.name)
		}
		return StringValue(r.data[o.field]), nil
	case opPipe:
		return r.pipeline(o.pipe)
	}
	return o.val, nil
}

// param is the parameter the i-th argument binds to.
func (f *Func[S]) param(i int) Param {
	if i >= len(f.Params) {
		return f.Params[len(f.Params)-1] // Variadic: parse checked the count
	}
	return f.Params[i]
}

// arity checks a call's argument count.
func (f *Func[S]) arity(n int) error {
	fixed := len(f.Params)
	if f.Variadic {
		fixed--
	}
	switch {
	case f.Variadic && n >= fixed:
		return nil
	case !f.Variadic && n == fixed:
		return nil
	}
	return fmt.Errorf("%s takes %s, got %d", f.Name, f.usage(), n)
}

// usage says what f takes: "2 arguments (min max)".
func (f *Func[S]) usage() string {
	if len(f.Params) == 0 {
		return "no arguments"
	}
	names := make([]string, len(f.Params))
	for i, p := range f.Params {
		names[i] = p.Name
	}
	if f.Variadic {
		names[len(names)-1] += " …"
		return fmt.Sprintf("arguments (%s)", strings.Join(names, " "))
	}
	word := "arguments"
	if len(f.Params) == 1 {
		word = "argument"
	}
	return fmt.Sprintf("%d %s (%s)", len(f.Params), word, strings.Join(names, " "))
}

// funcNames lists the functions for error messages.
func funcNames[S any](funcs []Func[S]) string {
	if len(funcs) == 0 {
		return "none"
	}
	names := make([]string, len(funcs))
	for i, f := range funcs {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// Parse parses text under the options.
func Parse[S any](text string, o Options[S]) (*Template[S], error) {
	t := &Template[S]{funcs: slices.Clone(o.Funcs), fields: slices.Clone(o.Fields), maxOutput: o.MaxOutput, maxWork: o.MaxWork}
	if t.maxOutput <= 0 {
		t.maxOutput = DefaultMaxOutput
	}
	if t.maxWork <= 0 {
		t.maxWork = workPerOutput * t.maxOutput
	}
	p := &parser[S]{t: t, text: text, delims: o.Delims.orDefault()}
	if err := p.parse(); err != nil {
		return nil, err
	}
	return t, nil
}
