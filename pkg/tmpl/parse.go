package tmpl

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is a parse error: where in the text and what is wrong, with what
// to write instead.
type Error struct {
	Line, Col int // 1-based, Col in bytes
	Msg       string
}

func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg) }

type parser[S any] struct {
	t      *Template[S]
	text   string
	delims Delims
	toks   []token // the current action's
	next   int     // index into toks
}

type tokenKind uint8

const (
	tokString tokenKind = iota
	tokInt
	tokField
	tokIdent
	tokLeftParen
	tokRightParen
	tokPipe
)

type token struct {
	kind tokenKind
	text string // the identifier or field name; a string's value
	n    int64
	pos  int // byte offset in the text
}

func (p *parser[S]) errorf(pos int, format string, args ...any) error {
	line := 1 + strings.Count(p.text[:pos], "\n")
	col := pos - strings.LastIndexByte(p.text[:pos], '\n')
	return &Error{Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func isAlnum(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// parse splits the text into text and actions.
func (p *parser[S]) parse() error {
	left := p.delims.Left
	pos := 0
	trimNext := false // the previous action ended with " -}}"
	for pos < len(p.text) {
		i := strings.Index(p.text[pos:], left)
		if i < 0 {
			p.addText(p.text[pos:], trimNext, false)
			break
		}
		start := pos + i
		q := start + len(left)
		trimPrev := false
		if q+1 < len(p.text) && p.text[q] == '-' && isSpace(p.text[q+1]) {
			trimPrev, q = true, q+2
		}
		p.addText(p.text[pos:start], trimNext, trimPrev)
		var end int
		var err error
		// As in text/template, a comment starts right after the delimiter
		// (and its trim marker).
		if strings.HasPrefix(p.text[q:], "/*") {
			end, trimNext, err = p.comment(q)
		} else {
			end, trimNext, err = p.action(start, q)
		}
		if err != nil {
			return err
		}
		pos = end
	}
	return nil
}

// addText appends literal text, trimmed of leading or trailing white space
// by the actions' trim markers.
func (p *parser[S]) addText(s string, trimLeading, trimTrailing bool) {
	if trimLeading {
		s = strings.TrimLeft(s, " \t\r\n")
	}
	if trimTrailing {
		s = strings.TrimRight(s, " \t\r\n")
	}
	if s == "" {
		return
	}
	if n := len(p.t.nodes); n > 0 && p.t.nodes[n-1].pipe == nil {
		p.t.nodes[n-1].text += s
		return
	}
	p.t.nodes = append(p.t.nodes, node{text: s})
}

// comment skips {{/* … */}} from the "/*" at pos; it returns the offset
// after the closing delimiter and whether it trims.
func (p *parser[S]) comment(pos int) (int, bool, error) {
	i := strings.Index(p.text[pos+2:], "*/")
	if i < 0 {
		return 0, false, p.errorf(pos, "unclosed comment: end it with */%s", p.delims.Right)
	}
	after := pos + 2 + i + 2
	if end, trim, ok := p.closing(after); ok {
		return end, trim, nil
	}
	return 0, false, p.errorf(after, "a comment must end right before %s (write */%s)", p.delims.Right, p.delims.Right)
}

// closing reports whether the right delimiter, or " -" and it, starts at
// pos: the offset after it and whether it trims.
func (p *parser[S]) closing(pos int) (int, bool, bool) {
	right := p.delims.Right
	if strings.HasPrefix(p.text[pos:], right) {
		return pos + len(right), false, true
	}
	if pos < len(p.text) && isSpace(p.text[pos]) {
		rest := strings.TrimLeft(p.text[pos:], " \t\r\n")
		if strings.HasPrefix(rest, "-"+right) {
			return len(p.text) - len(rest) + 1 + len(right), true, true
		}
	}
	return 0, false, false
}

// action lexes and parses the action whose left delimiter is at start and
// whose content starts at q.
func (p *parser[S]) action(start, q int) (int, bool, error) {
	end, trim, err := p.lex(start, q)
	if err != nil {
		return 0, false, err
	}
	if len(p.toks) == 0 {
		return 0, false, p.errorf(start, "empty action: write a function, a field or a constant between %s and %s", p.delims.Left, p.delims.Right)
	}
	p.next = 0
	pipe, err := p.pipeline(0)
	if err != nil {
		return 0, false, err
	}
	if p.next < len(p.toks) {
		tok := p.toks[p.next]
		return 0, false, p.errorf(tok.pos, "unexpected %s", describe(tok))
	}
	p.t.nodes = append(p.t.nodes, node{pipe: pipe})
	return end, trim, nil
}

func describe(t token) string {
	switch t.kind {
	case tokRightParen:
		return `")"`
	case tokLeftParen:
		return `"("`
	case tokPipe:
		return `"|"`
	case tokString:
		return strconv.Quote(t.text)
	case tokInt:
		return strconv.FormatInt(t.n, 10)
	case tokField:
		return "." + t.text
	}
	return t.text
}

// lex reads the action's tokens into p.toks up to its right delimiter.
func (p *parser[S]) lex(start, pos int) (int, bool, error) {
	p.toks = p.toks[:0]
	text := p.text
	for {
		if end, trim, ok := p.closing(pos); ok {
			return end, trim, nil
		}
		if pos >= len(text) {
			return 0, false, p.errorf(start, "unclosed action: end it with %s", p.delims.Right)
		}
		c := text[pos]
		switch {
		case isSpace(c):
			pos++
		case c == '"' || c == '`':
			end := pos + 1
			if c == '`' {
				i := strings.IndexByte(text[end:], '`')
				if i < 0 {
					return 0, false, p.errorf(pos, "unterminated raw string")
				}
				end += i + 1
			} else {
				for ; end < len(text) && text[end] != '"'; end++ {
					if text[end] == '\\' {
						end++
					} else if text[end] == '\n' {
						break
					}
				}
				if end >= len(text) || text[end] != '"' {
					return 0, false, p.errorf(pos, "unterminated string: end it with \"")
				}
				end++
			}
			s, err := strconv.Unquote(text[pos:end])
			if err != nil {
				return 0, false, p.errorf(pos, "%s is not a Go string literal: %v", text[pos:end], err)
			}
			p.toks = append(p.toks, token{kind: tokString, text: s, pos: pos})
			pos = end
		case c == '(':
			p.toks = append(p.toks, token{kind: tokLeftParen, pos: pos})
			pos++
		case c == ')':
			p.toks = append(p.toks, token{kind: tokRightParen, pos: pos})
			pos++
		case c == '|':
			p.toks = append(p.toks, token{kind: tokPipe, pos: pos})
			pos++
		case c == '.':
			end := pos + 1
			for end < len(text) && isAlnum(text[end]) {
				end++
			}
			name := text[pos+1 : end]
			switch {
			case name == "" || name[0] >= '0' && name[0] <= '9':
				return 0, false, p.errorf(pos, "the dot (.) is refused: name a field (%s) or call a function", p.fieldList())
			case end < len(text) && text[end] == '.':
				return 0, false, p.errorf(pos, ".%s.…: fields have no fields; name one field (%s)", name, p.fieldList())
			}
			p.toks = append(p.toks, token{kind: tokField, text: name, pos: pos})
			pos = end
		case c == '$':
			return 0, false, p.errorf(pos, "variables ($…) are refused: write the value where it is used")
		case c == '\'':
			return 0, false, p.errorf(pos, "character constants are refused: write a string (\"a\")")
		case c == '-' || c == '+' || '0' <= c && c <= '9':
			end := pos + 1
			for end < len(text) && (isAlnum(text[end]) || text[end] == '.') {
				end++
			}
			lit := text[pos:end]
			n, err := strconv.ParseInt(lit, 10, 64)
			if err != nil {
				return 0, false, p.errorf(pos, "%s is not a decimal integer within ±9223372036854775807: numbers are integers, written in decimal", lit)
			}
			p.toks = append(p.toks, token{kind: tokInt, n: n, pos: pos})
			pos = end
		case isAlnum(c):
			end := pos
			for end < len(text) && isAlnum(text[end]) {
				end++
			}
			word := text[pos:end]
			if why, refused := keywords[word]; refused {
				return 0, false, p.errorf(pos, "%s is refused: %s", word, why)
			}
			if end < len(text) && text[end] == '.' {
				return 0, false, p.errorf(end, "%s.…: methods and fields of results are refused", word)
			}
			p.toks = append(p.toks, token{kind: tokIdent, text: word, pos: pos})
			pos = end
		case c == ':' || c == '=':
			return 0, false, p.errorf(pos, "variables (:=, =) are refused: write the value where it is used")
		case c == ',':
			return 0, false, p.errorf(pos, "\",\" is refused: arguments are separated by spaces and there is no range")
		default:
			r, _ := utf8.DecodeRuneInString(text[pos:])
			return 0, false, p.errorf(pos, "unexpected %q in an action", r)
		}
	}
}

// keywords are text/template's, refused with what to write instead.
var keywords = func() map[string]string {
	const loops = "templates have no loops, so a render takes as long as its text: write the repetitions out, or vary a value with randInt, pick or seq"
	const conditions = "templates have no conditions or blocks: to vary a value, draw it with pick \"a\" \"b\" or randInt"
	const nested = "templates cannot define or include other templates: write the text in place"
	const constants = "constants are strings (\"…\" or `…`) and decimal integers"
	return map[string]string{
		"range": loops, "break": loops, "continue": loops,
		"if": conditions, "else": conditions, "with": conditions, "end": conditions,
		"define": nested, "template": nested, "block": nested,
		"true": constants, "false": constants, "nil": constants,
	}
}()

func (p *parser[S]) fieldList() string {
	if len(p.t.fields) == 0 {
		return "this template has none"
	}
	names := make([]string, len(p.t.fields))
	for i, f := range p.t.fields {
		names[i] = "." + f
	}
	return strings.Join(names, " ")
}

func (p *parser[S]) peek() (token, bool) {
	if p.next < len(p.toks) {
		return p.toks[p.next], true
	}
	return token{}, false
}

// pipeline parses command ('|' command)* at nesting depth.
func (p *parser[S]) pipeline(depth int) (*pipeline, error) {
	if depth > MaxDepth {
		return nil, p.errorf(p.toks[p.next-1].pos, "parentheses nest deeper than %d", MaxDepth)
	}
	pipe := &pipeline{}
	for {
		c, err := p.command(depth, len(pipe.cmds) > 0)
		if err != nil {
			return nil, err
		}
		pipe.cmds = append(pipe.cmds, c)
		tok, ok := p.peek()
		if !ok || tok.kind != tokPipe {
			return pipe, nil
		}
		p.next++
	}
}

// command parses a function call with its operands, or one operand;
// piped says a value is passed to it as its last argument.
func (p *parser[S]) command(depth int, piped bool) (command, error) {
	tok, ok := p.peek()
	if !ok || tok.kind == tokPipe || tok.kind == tokRightParen {
		pos := p.toks[len(p.toks)-1].pos
		if ok {
			pos = tok.pos
		}
		return command{}, p.errorf(pos, "missing command: write a function, a field or a constant")
	}
	if tok.kind == tokIdent {
		p.next++
		fn, err := p.function(tok)
		if err != nil {
			return command{}, err
		}
		c := command{fn: fn, pos: tok.pos}
		for {
			next, ok := p.peek()
			if !ok || next.kind == tokPipe || next.kind == tokRightParen {
				break
			}
			o, err := p.operand(depth)
			if err != nil {
				return command{}, err
			}
			c.args = append(c.args, o)
		}
		n := len(c.args)
		if piped {
			n++
		}
		f := &p.t.funcs[fn]
		if err := f.arity(n); err != nil {
			return command{}, p.errorf(tok.pos, "%v", err)
		}
		for i, o := range c.args {
			if err := p.checkLiteral(f, i, o, c.args, tok); err != nil {
				return command{}, err
			}
		}
		return c, nil
	}
	o, err := p.operand(depth)
	if err != nil {
		return command{}, err
	}
	if piped {
		return command{}, p.errorf(tok.pos, "%s is not a function: a value can only be piped into a function (… | urlquery)", describe(tok))
	}
	if next, ok := p.peek(); ok && next.kind != tokPipe && next.kind != tokRightParen {
		return command{}, p.errorf(next.pos, "%s is not a function and takes no arguments", describe(tok))
	}
	return command{fn: -1, args: []operand{o}, pos: tok.pos}, nil
}

// checkLiteral refuses a literal or field argument a parameter does not
// accept, so that randString 4000000000 is a parse error.
func (p *parser[S]) checkLiteral(f *Func[S], i int, o operand, args []operand, tok token) error {
	par := f.param(i)
	if par.Kind != KindInt {
		return nil
	}
	switch {
	case o.kind == opField:
		return p.errorf(tok.pos, "%s: %s must be an integer, but .%s is a string", f.Name, par.Name, o.name)
	case o.kind == opValue && !o.val.isInt:
		return p.errorf(tok.pos, "%s: %s must be an integer, got %q", f.Name, par.Name, o.val.s)
	case o.kind == opValue && par.Check != nil:
		if err := par.Check(o.val.n); err != nil {
			return p.errorf(tok.pos, "%s: %s: %v", f.Name, par.Name, err)
		}
	}
	return nil
}

func (p *parser[S]) function(tok token) (int, error) {
	for i := range p.t.funcs {
		if p.t.funcs[i].Name == tok.text {
			return i, nil
		}
	}
	return 0, p.errorf(tok.pos, "%s is not a function here; the functions are: %s", tok.text, funcNames(p.t.funcs))
}

// operand parses one argument.
func (p *parser[S]) operand(depth int) (operand, error) {
	tok := p.toks[p.next]
	p.next++
	switch tok.kind {
	case tokString:
		return operand{kind: opValue, val: StringValue(tok.text)}, nil
	case tokInt:
		return operand{kind: opValue, val: IntValue(tok.n)}, nil
	case tokField:
		if p.t.fields == nil {
			return operand{kind: opField, field: -1, name: tok.text}, nil
		}
		for i, f := range p.t.fields {
			if f == tok.text {
				return operand{kind: opField, field: i, name: tok.text}, nil
			}
		}
		return operand{}, p.errorf(tok.pos, ".%s is not a field; the fields are %s", tok.text, p.fieldList())
	case tokIdent:
		// A function name as an argument calls it without arguments, as
		// in text/template: pick uuid uuid.
		fn, err := p.function(tok)
		if err != nil {
			return operand{}, err
		}
		if f := &p.t.funcs[fn]; f.arity(0) != nil {
			return operand{}, p.errorf(tok.pos, "%s takes %s: write (%s …) to pass its result", f.Name, f.usage(), f.Name)
		}
		return operand{kind: opPipe, pipe: &pipeline{cmds: []command{{fn: fn, pos: tok.pos}}}}, nil
	case tokLeftParen:
		pipe, err := p.pipeline(depth + 1)
		if err != nil {
			return operand{}, err
		}
		if closing, ok := p.peek(); !ok || closing.kind != tokRightParen {
			return operand{}, p.errorf(tok.pos, "unclosed \"(\"")
		}
		p.next++
		return operand{kind: opPipe, pipe: pipe}, nil
	}
	return operand{}, p.errorf(tok.pos, "unexpected %s", describe(tok))
}
