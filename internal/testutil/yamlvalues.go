package testutil

import (
	"encoding/json"
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// YAMLValuesUnder returns, as JSON, every value under a key named key in the
// YAML documents of files (multi-document files included): the plugin
// configs of the examples, as seeds for the decoders' fuzz targets.
func YAMLValuesUnder(t testing.TB, key string, files []string) [][]byte {
	t.Helper()
	var out [][]byte
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, inner := range v {
				if k == key {
					if b, err := json.Marshal(inner); err == nil {
						out = append(out, b)
					}
				}
				walk(inner)
			}
		case []any:
			for _, inner := range v {
				walk(inner)
			}
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range splitYAMLDocuments(data) {
			var v any
			if yaml.Unmarshal(doc, &v) == nil {
				walk(v)
			}
		}
	}
	return out
}

// splitYAMLDocuments splits a multi-document YAML file at its "---" lines.
func splitYAMLDocuments(data []byte) [][]byte {
	var docs [][]byte
	start := 0
	for i := 0; i+4 <= len(data); i++ {
		if (i == 0 || data[i-1] == '\n') && string(data[i:i+3]) == "---" && (i+3 == len(data) || data[i+3] == '\n' || data[i+3] == '\r') {
			docs = append(docs, data[start:i])
			start = i + 3
		}
	}
	return append(docs, data[start:])
}
