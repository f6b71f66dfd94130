package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decode decodes one JSON or YAML document into v, a pointer to a struct.
// A document whose first non-blank character is '{' is JSON; anything else
// is YAML. Decoding is strict: unknown fields, duplicate fields, field names
// in the wrong case, values of the wrong type and text after the document
// are errors, each naming the field path. An empty document is an error.
func Decode(data []byte, v any) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return errors.New("empty: write a JSON object or a YAML mapping")
	}
	if data[0] != '{' {
		converted, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			return fmt.Errorf("not valid YAML: %w", err)
		}
		data = bytes.TrimSpace(converted)
		if len(data) == 0 || data[0] != '{' {
			return fmt.Errorf("want a mapping of fields, got %s", describeJSON(data))
		}
	}

	// Pass 1, into a throwaway value: the strict checks with field paths
	// (encoding/json reports unknown fields without their path, and matches
	// names case-insensitively).
	var strict []error
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		scratch := reflect.New(rv.Type().Elem()).Interface()
		strict, _ = sigsjson.UnmarshalStrict(data, scratch)
	}
	// Pass 2, into v: type errors with their field path, including the
	// ones this package's types return from UnmarshalJSON.
	if err := json.Unmarshal(data, v); err != nil {
		return explain(err)
	}
	var errs Errors
	for _, err := range strict {
		var fe sigsjson.FieldError
		msg := err.Error()
		if errors.As(err, &fe) {
			path := fe.FieldPath()
			switch {
			case strings.HasPrefix(msg, "unknown field"):
				errs.Addf(path, "unknown field; check its spelling and case against the docs")
			case strings.HasPrefix(msg, "duplicate field"):
				errs.Addf(path, "set twice; keep one")
			default:
				errs.Addf(path, "%s", msg)
			}
			continue
		}
		errs = append(errs, err)
	}
	return errs.Err()
}

// DecodeFile reads a JSON or YAML file and decodes it with Decode. Errors
// start with the file's path.
func DecodeFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := Decode(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// explain turns encoding/json's errors into field-path errors.
func explain(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "(document)"
		}
		return &FieldError{Path: field, Err: fmt.Errorf("want %s, got %s", typeName(typeErr.Type), typeErr.Value)}
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("not valid JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	}
	return err
}

// typeName names a Go type the way a config author thinks of it.
func typeName(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	// A type of another package that knows its values (mtls.Mode).
	if v, ok := reflect.Zero(t).Interface().(interface{ ConfigValues() string }); ok {
		return v.ConfigValues()
	}
	switch t {
	case reflect.TypeFor[Duration]():
		return "a duration"
	case reflect.TypeFor[Number]():
		return "a number"
	case reflect.TypeFor[Cores]():
		return "cores"
	case reflect.TypeFor[CPUBudget]():
		return "cores or a share of the CPU request"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

// describeJSON says what kind of JSON value data is, for error messages.
func describeJSON(data []byte) string {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return "nothing"
	}
	switch data[0] {
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '{':
		return "an object"
	}
	return "a number"
}
