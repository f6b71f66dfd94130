package main

import (
	"os"
	"path/filepath"

	"github.com/danki-dev/danki/lab/scenario"
)

// labCache is the lab's cache directory: $DANKI_CACHE, else <root>/.cache
// (lab/scripts/lib.sh's rule).
func labCache(root string) string {
	if c := os.Getenv("DANKI_CACHE"); c != "" {
		return c
	}
	return filepath.Join(root, ".cache")
}

// labMesh is the running lab's LAB_MESH, for the results and the danki
// processes a scenario starts.
func labMesh(cache string) (string, error) {
	return scenario.LabMesh(cache)
}
