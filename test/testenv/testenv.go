package testenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Env is a running API server with the Istio and Argo Rollouts CRDs installed.
type Env struct {
	Config *rest.Config
	Kube   kubernetes.Interface
	Istio  istioclient.Interface
	Argo   argoclient.Interface

	env *envtest.Environment
}

// Start starts an Env for one test and stops it when the test ends. It skips
// the test under -short. Packages with several integration tests should share
// one Env through TestMain and New instead: a start costs ~5 s.
func Start(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the API server built by `make lab-bins` (skipped with -short)")
	}
	return start(t, "")
}

// StartArgo is Start with the Argo Rollouts CRDs of another argo-rollouts
// release (a tag, e.g. v1.8.5: the oldest controller the compatibility
// matrix tests) instead of the one go.mod pins.
func StartArgo(t testing.TB, argoVersion string) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the API server built by `make lab-bins` (skipped with -short)")
	}
	return start(t, argoVersion)
}

func start(t testing.TB, argoVersion string) *Env {
	t.Helper()
	e, err := newEnv(argoVersion)
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	return e
}

// New starts kube-apiserver and etcd from BinDir and installs the CRDs.
func New() (*Env, error) { return newEnv("") }

// newEnv is New with the Argo Rollouts CRDs of argoVersion ("": go.mod's).
func newEnv(argoVersion string) (*Env, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	crds, err := crdPaths(argoVersion)
	if err != nil {
		return nil, err
	}
	// envtest logs through controller-runtime's logger; send it to slog
	// (stderr) instead of letting it complain that none was set.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.Default().Handler()))
	env := &envtest.Environment{
		BinaryAssetsDirectory:    bin,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              crds,
			ErrorIfPathMissing: true,
			MaxTime:            60 * time.Second,
		},
	}
	// Keep the servers' output: when a start fails, its tail is the reason.
	var apiOut, etcdOut tailBuffer
	env.ControlPlane.GetAPIServer().Out, env.ControlPlane.GetAPIServer().Err = &apiOut, &apiOut
	env.ControlPlane.Etcd = &envtest.Etcd{Out: &etcdOut, Err: &etcdOut}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start API server from %s: %w\nkube-apiserver output:\n%s\netcd output:\n%s", bin, err, apiOut.String(), etcdOut.String())
	}
	e := &Env{Config: cfg, env: env}
	if e.Kube, err = kubernetes.NewForConfig(cfg); err == nil {
		if e.Istio, err = istioclient.NewForConfig(cfg); err == nil {
			e.Argo, err = argoclient.NewForConfig(cfg)
		}
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("build clients: %w", err), env.Stop())
	}
	return e, nil
}

// Stop stops the API server and etcd.
func (e *Env) Stop() error { return e.env.Stop() }

// BinDir is the directory with kube-apiserver and etcd: $KUBEBUILDER_ASSETS if
// set, else <cache>/lab/bin where lab/scripts/build.sh puts them.
func BinDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		cache, err := CacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "lab", "bin")
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%s not found in %s: run `make lab-bins` (or set KUBEBUILDER_ASSETS): %w", name, dir, err)
		}
	}
	return dir, nil
}

// CacheDir is $DANKI_CACHE, or .cache at the repository root.
func CacheDir() (string, error) {
	if dir := os.Getenv("DANKI_CACHE"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache"), nil
}

// RepoRoot walks up from the working directory to the directory holding
// danki's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/danki-dev/danki\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("danki repository root (go.mod of github.com/danki-dev/danki) not found above the working directory")
		}
		dir = parent
	}
}

// CRDPaths lists the CRD manifests shipped inside the Istio API and Argo
// Rollouts modules that go.mod pins, so the API server validates against the
// same schemas as a real cluster at those versions.
func CRDPaths() ([]string, error) { return crdPaths("") }

// crdPaths is CRDPaths with argo-rollouts at argoVersion ("": go.mod's).
func crdPaths(argoVersion string) ([]string, error) {
	istio, err := ModuleDir("istio.io/api")
	if err != nil {
		return nil, err
	}
	argoModule := "github.com/argoproj/argo-rollouts"
	if argoVersion != "" {
		argoModule += "@" + argoVersion
	}
	argo, err := ModuleDir(argoModule)
	if err != nil {
		return nil, err
	}
	paths := []string{filepath.Join(istio, "kubernetes", "customresourcedefinitions.gen.yaml")}
	for _, f := range []string{"rollout-crd.yaml", "analysis-template-crd.yaml", "cluster-analysis-template-crd.yaml", "analysis-run-crd.yaml", "experiment-crd.yaml"} {
		paths = append(paths, filepath.Join(argo, "manifests", "crds", f))
	}
	return paths, nil
}

// ModuleDir returns the directory of a module in the module cache, downloading
// it if needed.
func ModuleDir(path string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", path)
	if root, err := RepoRoot(); err == nil {
		cmd.Dir = root
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s", path, err, stderr.String())
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("go mod download %s: parse output: %w", path, err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", path, mod.Error)
	}
	return mod.Dir, nil
}

// tailBuffer keeps the last 8 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - 8<<10; over > 0 {
		b.buf = b.buf[over:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
