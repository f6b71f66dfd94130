package warmup

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Target is one pod (or server) to warm, addressed directly.
type Target struct {
	// Name is the pod name, or host:port for a plain URL.
	Name string `json:"name"`
	// URL is the base URL, scheme://host:port, with no path.
	URL string `json:"url"`
}

func (t Target) String() string {
	host := strings.TrimPrefix(t.URL, "http://")
	if t.Name == "" || t.Name == host {
		return host
	}
	return t.Name + " (" + host + ")"
}

// URLTargets turns base URLs ("http://10.0.0.5:8080") into targets. field
// names the setting in errors (e.g. "urls" or "--url").
func URLTargets(field string, urls []string) ([]Target, error) {
	var targets []Target
	var errs []error
	seen := map[string]bool{}
	for i, raw := range urls {
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s[%d]: %w", field, i, err))
			continue
		case u.Scheme != "http":
			errs = append(errs, fmt.Errorf("%s[%d]: %q: only http:// targets are supported (warm-up talks to pods directly, not through the mesh's TLS)", field, i, raw))
			continue
		case u.Host == "":
			errs = append(errs, fmt.Errorf("%s[%d]: %q has no host; write http://host:port", field, i, raw))
			continue
		case (u.Path != "" && u.Path != "/") || u.RawQuery != "":
			errs = append(errs, fmt.Errorf("%s[%d]: %q: give the base URL (http://host:port) only; the path belongs to the requests (path/--path)", field, i, raw))
			continue
		}
		base := "http://" + u.Host
		if seen[base] {
			continue
		}
		seen[base] = true
		targets = append(targets, Target{Name: u.Host, URL: base})
	}
	return targets, errors.Join(errs...)
}
