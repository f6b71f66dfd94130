package main

import (
	"os"
	"path/filepath"
)

// labCache is the lab's cache directory: $DANKI_CACHE, else <root>/.cache
// (lab/scripts/lib.sh's rule).
func labCache(root string) string {
	if c := os.Getenv("DANKI_CACHE"); c != "" {
		return c
	}
	return filepath.Join(root, ".cache")
}
