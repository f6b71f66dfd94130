package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
)

func parseMeshFlags(t *testing.T, args ...string) *meshFlags {
	t.Helper()
	f := &meshFlags{}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return f
}

// TestMeshFlagsDefaults: without flags danki runs in auto mode against
// istiod's usual address, as the ServiceAccount "danki" of its own
// namespace ($POD_NAMESPACE here).
func TestMeshFlagsDefaults(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "argo-rollouts")
	cfg, err := parseMeshFlags(t).config()
	if err != nil {
		t.Fatal(err)
	}
	want := mtls.MeshConfig{
		Mode:           mtls.Auto,
		CAAddress:      mtls.DefaultCAAddress,
		CAServerName:   mtls.DefaultCAServerName,
		ClusterID:      mtls.DefaultClusterID,
		Namespace:      "argo-rollouts",
		ServiceAccount: DefaultMeshServiceAccount,
		Validity:       mtls.DefaultValidity,
	}
	if cfg == nil || *cfg != want {
		t.Fatalf("config() = %+v, want %+v", cfg, want)
	}

	// --mesh-namespace wins over the environment.
	cfg, err = parseMeshFlags(t, "--mesh-namespace", "danki-system", "--mesh-service-account", "warmer", "--mtls", "istio").config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Namespace != "danki-system" || cfg.ServiceAccount != "warmer" || cfg.Mode != mtls.Istio {
		t.Fatalf("config() = %+v, want istio as danki-system/warmer", cfg)
	}
}

// TestMeshFlagsOffIsNoMesh: --mtls off builds no Mesh (every pod in
// plaintext, istiod never asked), and the policy's Mesh stays nil.
func TestMeshFlagsOffIsNoMesh(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	f := parseMeshFlags(t, "--mtls", "off")
	pol, closeMesh, err := f.withMesh(policy.Local(), nil, log, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	defer closeMesh()
	if pol.Mesh != nil {
		t.Fatalf("--mtls off: policy.Mesh = %v, want nil", pol.Mesh)
	}
	if !strings.Contains(logs.String(), "mtls=off") {
		t.Errorf("log %q does not say mtls=off", logs.String())
	}

	// The control: auto builds one.
	pol, closeMesh2, err := parseMeshFlags(t, "--mesh-namespace", "ns").withMesh(policy.Local(), nil, log, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	defer closeMesh2()
	if pol.Mesh == nil || pol.Mesh.Mode() != mtls.Auto {
		t.Fatalf("default: policy.Mesh = %v, want a Mesh in auto mode", pol.Mesh)
	}
}

// TestMeshFlagsRefuseNamingTheFlag: every bad value is refused at start
// with the flag's name, and no Mesh is built.
func TestMeshFlagsRefuseNamingTheFlag(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "root.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mtls", "strict"}, `--mtls: mtls: "strict": want auto, istio or off`},
		{[]string{"--mesh-cert-validity", "0s"}, "--mesh-cert-validity 0s: must be > 0"},
		{[]string{"--mesh-service-account", ""}, "--mesh-service-account is empty"},
		{[]string{"--mesh-root-file", filepath.Join(dir, "missing.pem")}, "missing.pem: open "},
		{[]string{"--mesh-root-file", notPEM}, "no PEM CERTIFICATE found"},
	} {
		m, err := parseMeshFlags(t, tc.args...).mesh(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), slog.LevelInfo)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.args[0]) {
			t.Errorf("%v: error %v, want it to name %s and contain %q", tc.args, err, tc.args[0], tc.want)
		}
		if m != nil {
			t.Errorf("%v: a Mesh was built despite the error", tc.args)
		}
	}
}

// TestMeshFlagsOnEveryLoadCommand: the plugins, the gate and each CLI
// command that sends load to pods take the same mesh flags, and a bad
// --mtls stops the CLI commands before any load.
func TestMeshFlagsOnEveryLoadCommand(t *testing.T) {
	names := []string{"mtls", "istiod-address", "istiod-server-name", "mesh-cluster-id", "mesh-root-file", "mesh-namespace", "mesh-service-account", "mesh-cert-validity"}
	root := newRootCmd()
	for _, path := range [][]string{{"plugin"}, {"gate"}, {"warmup"}, {"analyze"}, {"capacity"}} {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if cmd.Flags().Lookup(n) == nil {
				t.Errorf("danki %s has no --%s", strings.Join(path, " "), n)
			}
		}
	}
	// 127.0.0.1:1 refuses at once: were the flag not checked first, the
	// error would be a connection's.
	for _, args := range [][]string{
		{"warmup", "--url", "http://127.0.0.1:1", "--health-timeout", "1s", "--mtls", "strict"},
		{"capacity", "--url", "http://127.0.0.1:1", "--mtls", "strict"},
		{"analyze", "--source", "load", "--url", "http://127.0.0.1:1", "--p99", "1s", "--mtls", "strict"},
	} {
		root := newRootCmd()
		root.SetArgs(args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "--mtls") {
			t.Errorf("danki %s: error %v, want one naming --mtls", strings.Join(args, " "), err)
		}
	}
}

// TestPluginLogsItsMeshOnce runs the real binary as `danki plugin`: the mesh
// settings are logged once, as JSON on stderr (stdout is go-plugin's), and
// a bad --mtls ends it before it serves.
func TestPluginLogsItsMeshOnce(t *testing.T) {
	bin := buildDanki(t)
	run := func(args ...string) (stdout, stderr string, err error) {
		cmd := exec.Command(bin, append([]string{"plugin"}, args...)...)
		// No handshake variable: the plugin stops right after building
		// its policy, with the error that it was not started by Argo.
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("danki plugin %v still running after 30 s", args)
		}
		return o.String(), e.String(), err
	}

	stdout, stderr, err := run("--mtls", "istio", "--mesh-namespace", "danki-system", "--istiod-address", "istiod.mesh:15012")
	if err == nil || !strings.Contains(stderr, "ARGO_ROLLOUTS_RPC_PLUGIN") {
		t.Fatalf("danki plugin without the handshake: %v, stderr %q", err, stderr)
	}
	if stdout != "" {
		t.Errorf("danki plugin wrote to stdout (go-plugin's): %q", stdout)
	}
	var meshLines []map[string]any
	for line := range strings.SplitSeq(stderr, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "mesh" {
			meshLines = append(meshLines, rec)
		}
	}
	if len(meshLines) != 1 {
		t.Fatalf("%d mesh log lines in stderr, want 1:\n%s", len(meshLines), stderr)
	}
	rec := meshLines[0]
	if rec["mtls"] != "istio" || rec["istiod"] != "istiod.mesh:15012" || rec["principal"] != "cluster.local/ns/danki-system/sa/danki" {
		t.Errorf("mesh log line %v: want mtls istio, istiod istiod.mesh:15012, principal cluster.local/ns/danki-system/sa/danki", rec)
	}

	_, stderr, err = run("--mtls", "strict")
	if err == nil || !strings.Contains(stderr, "--mtls") || strings.Contains(stderr, "ARGO_ROLLOUTS_RPC_PLUGIN") {
		t.Errorf("danki plugin --mtls strict: %v, stderr %q; want the --mtls error before serving", err, stderr)
	}
}

// TestDeployArgsParse: the args deploy/ gives danki — the three plugin
// registrations (file and https) and the gate's container — are flags the
// commands have, with values they accept (the mesh flags among them).
func TestDeployArgsParse(t *testing.T) {
	var lines []string
	for _, file := range []string{"../../deploy/argo-rollouts-config.yaml", "../../deploy/http/argo-rollouts-config.yaml"} {
		var cm struct {
			Data map[string]string `json:"data"`
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, &cm); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for key, entries := range cm.Data {
			var plugins []struct {
				Args []string `json:"args"`
			}
			if err := yaml.Unmarshal([]byte(entries), &plugins); err != nil {
				t.Fatalf("%s %s: %v", file, key, err)
			}
			for _, p := range plugins {
				lines = append(lines, strings.Join(p.Args, "\x00"))
			}
		}
	}
	var deploy appsv1.Deployment
	raw, err := os.ReadFile("../../deploy/gate/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---") {
		if strings.Contains(doc, "kind: Deployment") {
			if err := yaml.Unmarshal([]byte(doc), &deploy); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(deploy.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("deploy/gate/deployment.yaml: no gate container found")
	}
	lines = append(lines, strings.Join(deploy.Spec.Template.Spec.Containers[0].Args, "\x00"))
	if len(lines) != 7 {
		t.Fatalf("found %d arg lists in deploy/, want 7 (3 + 3 plugins, the gate)", len(lines))
	}
	for _, l := range lines {
		args := strings.Split(l, "\x00")
		cmd, rest, err := newRootCmd().Find(args)
		if err == nil {
			err = cmd.ParseFlags(rest)
		}
		if err == nil && !slices.Contains(args, "--mtls") && !slices.Contains(args, "--mtls=auto") {
			err = errors.New("no --mtls: deploy/ shows the mesh flags")
		}
		if err != nil {
			t.Errorf("danki %v: %v", args, err)
		}
	}
}
