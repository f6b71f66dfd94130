package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/danki-dev/danki/pkg/warmup"
)

// checkURLFlag refuses a base URL given without its scheme (--url
// 127.0.0.1:8080), which url.Parse reads as a path or as the scheme
// "localhost", and says what to write instead.
func checkURLFlag(flag string, urls []string) error {
	var errs []error
	for _, u := range urls {
		if u != "" && !strings.Contains(u, "://") {
			errs = append(errs, fmt.Errorf("--%s %s: add the scheme: --%s http://%s", flag, u, flag, u))
		}
	}
	return errors.Join(errs...)
}

// checkOutputFile makes sure a result file can be written before the run
// it reports on starts: a typo in its directory fails at once, not after a
// warm-up of minutes whose result is then lost. A file that did not exist
// is removed again (the run writes it at its end).
func checkOutputFile(flag, path string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("--%s %s: is a directory: give a file name, e.g. --%s %s", flag, path, flag, strings.TrimSuffix(path, "/")+"/warmup.json")
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("--%s %s: cannot be written (checked before the run): %w", flag, path, err)
	}
	f.Close()
	if errors.Is(statErr, os.ErrNotExist) {
		_ = os.Remove(path)
	}
	return nil
}

// checkRoomToConverge refuses a --max-requests the stopping rule cannot
// converge within: it calls no pod warm before cfg.MinStop() requests
// (--min-requests, and two blocks of windows of at least the rule's
// smallest block), so a smaller budget could only end "not warm".
func checkRoomToConverge(cfg warmup.Config) error {
	if !cfg.Converging() || cfg.MaxRequests >= cfg.MinStop() {
		return nil
	}
	return fmt.Errorf("--max-requests %d: the stopping rule calls no pod warm before %d requests per target (--min-requests %d, and two blocks of --window %d requests' windows, each block at least --stable-windows %d windows and the rule's smallest block), so the warm-up could only fail: raise --max-requests to at least %d, or send a fixed count with --until-converged=false",
		cfg.MaxRequests, cfg.MinStop(), cfg.MinRequests, cfg.Window, cfg.StableWindows, cfg.MinStop())
}
