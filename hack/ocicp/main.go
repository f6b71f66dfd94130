// Command ocicp is the cp of the plugin image's archive (hack/ociarchive):
// that image has no busybox (no base image can be pulled without a
// registry), and the Argo Rollouts controller's init container runs
// `cp /danki /danki-bin/danki` (deploy/helm/argo-rollouts-values.yaml). It
// copies one file, SRC to DST (or into DST if DST is a directory), and makes
// the copy mode 0755. Nothing else of cp: no flags, no several sources.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: cp SRC DST")
		os.Exit(2)
	}
	if err := copyFile(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "cp:", err)
		os.Exit(1)
	}
}

func copyFile(src, dst string) error {
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, filepath.Base(src))
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("%s to %s: %w", src, dst, err)
	}
	if err := out.Chmod(0o755); err != nil { // the umask may have taken bits off
		out.Close()
		return err
	}
	return out.Close()
}
