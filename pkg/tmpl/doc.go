// Package tmpl is the template language of everything a tenant writes that
// danki renders: request paths, header values, bodies, gRPC messages and
// metadata (pkg/warmup) and PromQL queries (pkg/analysis). One plugin
// process serves every tenant of a cluster, so a template must not be able
// to hang it or exhaust its memory; Go's text/template can do both
// ({{range 1000000000000}}, define/template recursion, printf widths,
// a function asked for gigabytes).
//
// The language is a strict subset of text/template's syntax: text with
// actions between delimiters (default {{ and }}), the trim markers {{- and
// -}}, and comments {{/* … */}}. An action is a pipeline, command
// ('|' command)*, where the value of each command is passed as the last
// argument of the next, as in text/template. A command is a function name
// followed by its operands, or a single operand. An operand is a Go string
// literal ("…" or `…`), a decimal integer, a field of the data (.Selector),
// a function name alone (a call without arguments) or a parenthesised
// pipeline. Everything else text/template offers (range, if, with, else,
// end, define, template, block, variables, the dot, methods, chained
// fields, true/false/nil, other constants) is refused when the template is
// parsed, with a message saying what to write instead.
//
// Functions are declared by the caller (Func: name, parameters, a Go
// function over string and integer values), plus the one built-in users
// write today, urlquery (URLQuery). An unknown function, a wrong number of
// arguments, or a literal argument a parameter refuses (randString 4000000000)
// is a parse error. Fields are declared too (Options.Fields): an unknown
// field is a parse error.
//
// A render is bounded by construction, not by a clock: there are no loops
// and no recursion, every action runs once, and nesting is at most MaxDepth
// deep, so the number of function calls is at most the number of commands
// in the text. What they produce is bounded by a budget (Options.MaxOutput,
// Options.MaxWork; defaults DefaultMaxOutput and 4×): each value a function
// returns and the rendered text are at most MaxOutput bytes, and all values
// functions return in one render add up to at most MaxWork bytes. Exceeding
// either is a render error that names the limit and its size. Callers render
// each template once when a config is parsed (a sample), so a template
// whose render exceeds the budget is refused then, naming its field.
//
// The engine is pure: no clock, no I/O, no global state. Randomness and
// counters belong to the caller's functions, which receive the caller's
// state S at render time (Template.Render), so one parsed template serves
// any number of goroutines, each with its own state.
package tmpl
