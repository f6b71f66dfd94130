package scenario

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/danki-dev/danki/lab/traffic"
)

func TestLabMeshReadsTheRunningLabsMode(t *testing.T) {
	cache := t.TempDir()
	if _, err := LabMesh(cache); err == nil || !strings.Contains(err.Error(), "is the lab up?") {
		t.Errorf("no mesh-mode file: err %v, want one asking whether the lab is up", err)
	}
	run := filepath.Join(cache, "lab", "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	for content, want := range map[string]string{"strict\n": MeshStrict, "permissive": MeshPermissive, "none\n": MeshNone, "STRICT": ""} {
		if err := os.WriteFile(filepath.Join(run, "mesh-mode"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := LabMesh(cache)
		if want == "" {
			if err == nil || !strings.Contains(err.Error(), "want none, permissive or strict") {
				t.Errorf("mesh-mode %q: got %q, %v; want an error naming the modes", content, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("mesh-mode %q: got %q, %v; want %q", content, got, err, want)
		}
	}
}

func TestMeshFlagsOnlyWithSidecars(t *testing.T) {
	if f := MeshFlags(MeshNone, "danki-gate"); f != nil {
		t.Errorf("MeshFlags(none) = %v, want none", f)
	}
	f := MeshFlags(MeshStrict, "danki-gate")
	for _, want := range [][]string{{"--istiod-address", LabCAAddress}, {"--mesh-namespace", "danki-gate"}, {"--mesh-service-account", DankiServiceAccount}} {
		i := slices.Index(f, want[0])
		if i < 0 || i+1 >= len(f) || f[i+1] != want[1] {
			t.Errorf("MeshFlags(strict) = %v, want %s %s", f, want[0], want[1])
		}
	}
}

func TestReportSaysTheUsersPath(t *testing.T) {
	for mesh, want := range map[string]string{
		MeshStrict: "Users' path: gateway → sidecar → app, Istio mTLS, PeerAuthentication STRICT (LAB_MESH=strict)",
		MeshNone:   "Users' path: gateway → app, no sidecars (LAB_MESH=none)",
	} {
		var b strings.Builder
		if err := WriteReport(&b, traffic.Text, &Result{Mesh: mesh}); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(b.String(), want) {
			t.Errorf("LAB_MESH=%s: report starts %q, want %q", mesh, b.String()[:min(len(b.String()), 120)], want)
		}
	}
}
