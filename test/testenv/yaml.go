package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// YAMLDocuments splits a multi-document YAML file into its documents,
// leaving out empty and comment-only ones (a leading "---" or a file's
// explanatory header is not an object).
func YAMLDocuments(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var docs [][]byte
	for {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(stripComments(raw))) > 0 {
			docs = append(docs, raw)
		}
	}
}

func stripComments(raw []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}
