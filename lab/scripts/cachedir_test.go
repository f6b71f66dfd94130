package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCacheDir holds hack/cache-dir.sh to its rule: $DANKI_CACHE when set;
// else the clone's .cache as it is; else .cache made a link to the
// machine's cache outside the clone, which a second clone then shares.
func TestCacheDir(t *testing.T) {
	script, err := filepath.Abs("../../hack/cache-dir.sh")
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	clone := func(name string) string {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(filepath.Join(dir, "hack"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "hack", "cache-dir.sh"), body, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	run := func(repo string, env ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(repo, "hack", "cache-dir.sh"))
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("hack/cache-dir.sh: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	shared := filepath.Join(home, ".cache", "danki")

	first, second := clone("first"), clone("second")
	for _, repo := range []string{first, second, first} {
		if got, want := run(repo), filepath.Join(repo, ".cache"); got != want {
			t.Fatalf("printed %q, want %q", got, want)
		}
		if target, err := os.Readlink(filepath.Join(repo, ".cache")); err != nil || target != shared {
			t.Fatalf("%s/.cache links to %q (%v), want %s", repo, target, err, shared)
		}
	}
	if err := os.WriteFile(filepath.Join(first, ".cache", "built"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(second, ".cache", "built")); err != nil {
		t.Errorf("the second clone does not see what the first built: %v", err)
	}

	own := clone("own")
	if err := os.Mkdir(filepath.Join(own, ".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(own)
	if fi, err := os.Lstat(filepath.Join(own, ".cache")); err != nil || !fi.IsDir() {
		t.Errorf("an existing .cache directory was not kept as it is: %v %v", fi, err)
	}

	set := clone("set")
	if got := run(set, "DANKI_CACHE=/somewhere/else"); got != "/somewhere/else" {
		t.Errorf("with DANKI_CACHE set, printed %q", got)
	}
	if _, err := os.Lstat(filepath.Join(set, ".cache")); !os.IsNotExist(err) {
		t.Errorf("with DANKI_CACHE set, .cache was made (%v)", err)
	}

	xdg := clone("xdg")
	run(xdg, "XDG_CACHE_HOME="+filepath.Join(home, "xdg"))
	if target, _ := os.Readlink(filepath.Join(xdg, ".cache")); target != filepath.Join(home, "xdg", "danki") {
		t.Errorf("with XDG_CACHE_HOME set, .cache links to %q", target)
	}
}
