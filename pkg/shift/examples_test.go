package shift

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"sigs.k8s.io/yaml"
)

// TestExampleVirtualServicesStripTheMarker: every VirtualService danki
// ships as an example or runs in the lab drops the warm-up marker header from user requests
// on each of its http routes, as docs/install.md asks of users: a copied
// example must not let callers send X-Danki-Warmup through the gateway.
func TestExampleVirtualServicesStripTheMarker(t *testing.T) {
	found := 0
	docSep := regexp.MustCompile(`(?m)^---\s*$`)
	walk := func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, doc := range docSep.Split(string(data), -1) {
			if !bytes.Contains([]byte(doc), []byte("kind: VirtualService")) {
				continue
			}
			var vs networkingv1.VirtualService
			if err := yaml.Unmarshal([]byte(doc), &vs); err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			if vs.Kind != "VirtualService" {
				continue
			}
			found++
			for i, r := range vs.Spec.Http {
				if !stripsMarker(r.GetHeaders()) {
					t.Errorf("%s: VirtualService %s spec.http[%d] (%q): no headers.request.remove: [%s]: add it, so users cannot send the warm-up marker", path, vs.Name, i, r.GetName(), markerHeader)
				}
			}
		}
		return nil
	}
	for _, root := range []string{"../../examples", "../../lab/manifests"} {
		if err := filepath.WalkDir(root, walk); err != nil {
			t.Fatal(err)
		}
	}
	if found < 5 {
		t.Fatalf("found only %d example VirtualServices: is the walk broken?", found)
	}
}
