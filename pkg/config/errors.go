package config

import (
	"errors"
	"fmt"
)

// FieldError is a problem with one field, named by its path in the
// document (slo.p99, requests[0].method).
type FieldError struct {
	Path string
	Err  error
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Errors collects every problem of a config, so that the user sees them all
// at once. The zero value is ready to use.
type Errors []error

// Addf records a problem with the field at path.
func (e *Errors) Addf(path, format string, args ...any) {
	*e = append(*e, &FieldError{Path: path, Err: fmt.Errorf(format, args...)})
}

// Add records err (when not nil) for the field at path; an empty path adds
// err as it is. Errors from a nested Validate keep their own paths under
// path: Add("gate", err) turns "slo.p99: …" into "gate.slo.p99: …".
func (e *Errors) Add(path string, err error) {
	if err == nil {
		return
	}
	if path == "" {
		*e = append(*e, err)
		return
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, inner := range joined.Unwrap() {
			e.Add(path, inner)
		}
		return
	}
	var fe *FieldError
	if errors.As(err, &fe) && fe == err {
		*e = append(*e, &FieldError{Path: path + "." + fe.Path, Err: fe.Err})
		return
	}
	*e = append(*e, &FieldError{Path: path, Err: err})
}

// Err joins the problems with errors.Join; nil when there are none.
func (e Errors) Err() error { return errors.Join(e...) }
