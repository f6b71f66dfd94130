package runner

import (
	"fmt"
	"strings"
)

// imageRef is a container image split into repository and tag.
type imageRef struct {
	Repo string // e.g. danki.dev/sample-app
	Tag  string // e.g. v2; "latest" when the image names none
}

// parseImage splits "registry:5000/org/app:v2" or "app@sha256:…" into
// repository and tag. A digest counts as the tag.
func parseImage(image string) (imageRef, error) {
	if image == "" || strings.ContainsAny(image, " \t\n") {
		return imageRef{}, fmt.Errorf("image %q: must be a non-empty reference without spaces", image)
	}
	if repo, digest, ok := strings.Cut(image, "@"); ok {
		if repo == "" || digest == "" {
			return imageRef{}, fmt.Errorf("image %q: digest reference needs a repository and a digest", image)
		}
		return imageRef{Repo: repo, Tag: digest}, nil
	}
	// The tag follows the last colon after the last slash; a colon before
	// it belongs to a registry port.
	slash := strings.LastIndex(image, "/")
	if colon := strings.LastIndex(image, ":"); colon > slash {
		if colon == len(image)-1 {
			return imageRef{}, fmt.Errorf("image %q: empty tag after ':'", image)
		}
		return imageRef{Repo: image[:colon], Tag: image[colon+1:]}, nil
	}
	return imageRef{Repo: image, Tag: "latest"}, nil
}

// ImageCommands maps image repositories to the command that runs them.
type ImageCommands map[string][]string

// Set parses one "REPO=COMMAND ARGS…" mapping (the --image flag's syntax).
func (m ImageCommands) Set(spec string) error {
	repo, cmd, ok := strings.Cut(spec, "=")
	repo = strings.TrimSpace(repo)
	argv := strings.Fields(cmd)
	if !ok || repo == "" || len(argv) == 0 {
		return fmt.Errorf("image mapping %q: want REPO=COMMAND [ARGS…], e.g. danki.dev/sample-app=java -jar sample-app.jar", spec)
	}
	if strings.Contains(repo, "@") || strings.LastIndex(repo, ":") > strings.LastIndex(repo, "/") {
		return fmt.Errorf("image mapping %q: give the repository without tag or digest (the tag becomes $VERSION)", spec)
	}
	m[repo] = argv
	return nil
}

// lookup returns the command for image and its tag, or ok=false when the
// image maps to nothing (the pod is then faked, not run).
func (m ImageCommands) lookup(image string) (argv []string, tag string, ok bool, err error) {
	ref, err := parseImage(image)
	if err != nil {
		return nil, "", false, err
	}
	argv, ok = m[ref.Repo]
	return argv, ref.Tag, ok, nil
}
