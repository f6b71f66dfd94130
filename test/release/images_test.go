package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// wantImage is what one archive of dist/images must hold.
type wantImage struct {
	file   string // danki-linux-amd64.tar
	tag    string // ghcr.io/danki-dev/danki:VERSION
	arch   string
	plugin bool
	// dankiSHA256 is checksums.txt's sum of danki-linux-<arch>: /danki
	// must be those very bytes.
	dankiSHA256 string
}

var imageChecksumLine = regexp.MustCompile(`^([0-9a-f]{64})  (danki(-plugin)?-linux-[a-z0-9]+\.tar)$`)

// TestImages: hack/release.sh's image archives (hack/ociarchive), one per
// image per linux platform, are docker-save archives that `kind load
// image-archive` can read, tagged ghcr.io/danki-dev/{danki,danki-plugin}:VERSION,
// each running as 65532:65532 on the platform's architecture with
// checksums.txt's binary at /danki; the plugin image's Cmd is the init
// container's cp, and its /bin/cp is a static binary of that architecture.
func TestImages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds danki with the release flags (skipped with -short)")
	}
	out := builtRelease(t)
	sums := readSums(t, filepath.Join(out, "checksums.txt"), checksumLine)
	imageSums := readSums(t, filepath.Join(out, "images", "checksums.txt"), imageChecksumLine)

	var wants []wantImage
	for _, p := range testPlatforms() {
		goos, arch, _ := strings.Cut(p, "/")
		if goos != "linux" {
			continue
		}
		for _, img := range []string{"danki", "danki-plugin"} {
			wants = append(wants, wantImage{
				file: img + "-linux-" + arch + ".tar", tag: "ghcr.io/danki-dev/" + img + ":" + testVersion,
				arch: arch, plugin: img == "danki-plugin", dankiSHA256: sums["danki-linux-"+arch],
			})
		}
	}
	var names []string
	for n := range imageSums {
		names = append(names, n)
	}
	var wantNames []string
	for _, w := range wants {
		wantNames = append(wantNames, w.file)
	}
	slices.Sort(names)
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Fatalf("images/checksums.txt lists %v, want %v", names, wantNames)
	}
	for _, w := range wants {
		p := filepath.Join(out, "images", w.file)
		if got := fileSHA256(t, p); got != imageSums[w.file] {
			t.Errorf("images/checksums.txt says %s for %s, the file's is %s", imageSums[w.file], w.file, got)
		}
		img := openArchive(t, p, w.tag)
		if err := validate.Image(img); err != nil {
			t.Errorf("%s: digests, sizes or config inconsistent: %v", w.file, err)
		}
		for _, problem := range imageProblems(img, w) {
			t.Errorf("%s: %s", w.file, problem)
		}
		if w.arch == "amd64" {
			checkProblemsCaught(t, img, w)
		}
	}
}

// openArchive opens the archive's image by its tag, and checks the tag is
// the only one manifest.json names.
func openArchive(t *testing.T, p, tag string) v1.Image {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(p, &ref)
	if err != nil {
		t.Fatalf("%s: no image tagged %s: %v", p, tag, err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(p) })
	if err != nil {
		t.Fatalf("%s: manifest.json: %v", p, err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{tag}) {
		t.Errorf("%s: manifest.json %+v, want one image tagged %s", p, m, tag)
	}
	return img
}

// imageProblems lists every way img differs from w.
func imageProblems(img v1.Image, w wantImage) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	cf, err := img.ConfigFile()
	if err != nil {
		return []string{"config: " + err.Error()}
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != w.arch {
		bad("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, w.arch)
	}
	if c.User != "65532:65532" {
		bad("user %q, want 65532:65532 (non-root, numeric for runAsNonRoot)", c.User)
	}
	if !cf.Created.Time.Equal(time.Unix(testEpoch, 0)) {
		bad("created %v, want SOURCE_DATE_EPOCH %d", cf.Created.Time, testEpoch)
	}
	if w.plugin {
		if len(c.Entrypoint) != 0 || !slices.Equal(c.Cmd, []string{"cp", "/danki", "/danki-bin/danki"}) {
			bad("entrypoint %q cmd %q, want none and the init container's [cp /danki /danki-bin/danki]", c.Entrypoint, c.Cmd)
		}
	} else if !slices.Equal(c.Entrypoint, []string{"/danki"}) || len(c.Cmd) != 0 {
		bad("entrypoint %q cmd %q, want [/danki] and none", c.Entrypoint, c.Cmd)
	}
	files, err := imageFiles(img)
	if err != nil {
		return append(problems, "layers: "+err.Error())
	}
	for _, f := range files {
		if !f.hdr.ModTime.Equal(time.Unix(testEpoch, 0)) {
			bad("/%s: time %v, want SOURCE_DATE_EPOCH %d", f.hdr.Name, f.hdr.ModTime, testEpoch)
		}
	}
	problems = append(problems, binaryProblems(files, "danki", w.arch)...)
	if sum := sha256.Sum256(files["danki"].data); hex.EncodeToString(sum[:]) != w.dankiSHA256 {
		bad("/danki's sha256 is not checksums.txt's %s", w.dankiSHA256)
	}
	if w.plugin {
		cp := lookPath(files, c.Env, "cp")
		if cp == "" {
			bad("no cp on the image's PATH (env %q): the init container's command fails", c.Env)
		} else {
			problems = append(problems, binaryProblems(files, cp, w.arch)...)
		}
	}
	return append(problems, userProblems(files)...)
}

// userProblems: /etc/passwd and /etc/group name 65532, /tmp is 1777, and the
// CA bundle is the build host's.
func userProblems(files map[string]imageFile) []string {
	var problems []string
	for _, f := range []string{"etc/passwd", "etc/group"} {
		found := false
		for _, line := range strings.Split(string(files[f].data), "\n") {
			fields := strings.Split(line, ":")
			found = found || (len(fields) >= 3 && fields[2] == "65532" && (f == "etc/group" || len(fields) == 7 && fields[3] == "65532"))
		}
		if !found {
			problems = append(problems, fmt.Sprintf("/%s names no 65532:\n%s", f, files[f].data))
		}
	}
	if tmp, ok := files["tmp"]; !ok || tmp.hdr.Typeflag != tar.TypeDir || tmp.hdr.Mode&0o7777 != 0o1777 {
		problems = append(problems, "no /tmp directory of mode 1777")
	}
	const ca = "etc/ssl/certs/ca-certificates.crt"
	if host, err := os.ReadFile("/" + ca); err == nil && !bytes.Equal(files[ca].data, host) {
		problems = append(problems, "/"+ca+" is not the build host's")
	}
	return problems
}

// binaryProblems: files[p] is a root-owned 0755 static ELF for arch.
func binaryProblems(files map[string]imageFile, p, arch string) []string {
	f, ok := files[p]
	if !ok || f.hdr.Typeflag != tar.TypeReg {
		return []string{"no file /" + p}
	}
	var problems []string
	if f.hdr.Mode&0o7777 != 0o755 || f.hdr.Uid != 0 {
		problems = append(problems, fmt.Sprintf("/%s: mode %o uid %d, want 755 and root's", p, f.hdr.Mode, f.hdr.Uid))
	}
	e, err := elf.NewFile(bytes.NewReader(f.data))
	if err != nil {
		return append(problems, fmt.Sprintf("/%s: not an ELF: %v", p, err))
	}
	defer e.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if want == 0 || e.Machine != want {
		problems = append(problems, fmt.Sprintf("/%s: ELF machine %v, want linux/%s's", p, e.Machine, arch))
	}
	for _, prog := range e.Progs {
		if prog.Type == elf.PT_INTERP {
			problems = append(problems, fmt.Sprintf("/%s has an ELF interpreter: not static", p))
		}
	}
	return problems
}

type imageFile struct {
	hdr  *tar.Header
	data []byte
}

// imageFiles: the image's filesystem, its layers applied in order (whiteouts
// honoured), by path without the leading /.
func imageFiles(img v1.Image) (map[string]imageFile, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]imageFile{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[strings.Trim(path.Clean(h.Name), "/")] = imageFile{hdr: h, data: data}
	}
}

// lookPath finds cmd on env's PATH among files, as the container runtime
// would: the path without the leading /, or "".
func lookPath(files map[string]imageFile, env []string, cmd string) string {
	for _, e := range env {
		dirs, ok := strings.CutPrefix(e, "PATH=")
		if !ok {
			continue
		}
		for _, d := range filepath.SplitList(dirs) {
			p := strings.Trim(path.Join(d, cmd), "/")
			if f, ok := files[p]; ok && f.hdr.Typeflag == tar.TypeReg && f.hdr.Mode&0o111 != 0 {
				return p
			}
		}
	}
	return ""
}

// checkProblemsCaught: imageProblems finds each of a few wrong images made
// from a right one, so that its silence on the archives means something.
func checkProblemsCaught(t *testing.T, img v1.Image, w wantImage) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	config := func(edit func(*v1.ConfigFile)) v1.Image {
		c := cf.DeepCopy()
		edit(c)
		m, err := mutate.ConfigFile(img, c)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	layer := func(name string, mode int64, data []byte) v1.Image {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Unix(testEpoch, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
		tw.Close()
		layerBytes := buf.Bytes()
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(layerBytes)), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		m, err := mutate.AppendLayers(img, l)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	cases := map[string]v1.Image{
		"user root":            config(func(c *v1.ConfigFile) { c.Config.User = "0" }),
		"user by name":         config(func(c *v1.ConfigFile) { c.Config.User = "nonroot" }),
		"architecture arm64":   config(func(c *v1.ConfigFile) { c.Architecture = "arm64" }),
		"entrypoint a shell":   config(func(c *v1.ConfigFile) { c.Config.Entrypoint = []string{"/bin/sh"} }),
		"created now":          config(func(c *v1.ConfigFile) { c.Created = v1.Time{Time: time.Now()} }),
		"another /danki":       layer("danki", 0o755, []byte("#!/bin/sh\n")),
		"/danki not 0755":      layer("danki", 0o644, mustFiles(t, img)["danki"].data),
		"passwd without 65532": layer("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n")),
		"/tmp not 1777":        layer("tmp/", 0o755, nil),
	}
	if w.plugin {
		cases["no cp on PATH"] = config(func(c *v1.ConfigFile) { c.Config.Env = []string{"PATH=/usr/bin"} })
	}
	for what, bad := range cases {
		if problems := imageProblems(bad, w); len(problems) == 0 {
			t.Errorf("%s with %s: imageProblems finds nothing wrong", w.file, what)
		}
	}
}

func mustFiles(t *testing.T, img v1.Image) map[string]imageFile {
	t.Helper()
	f, err := imageFiles(img)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// readSums reads a sha256sum file whose every line matches line (sum, name).
func readSums(t *testing.T, p string, line *regexp.Regexp) map[string]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("%s: line %q is not sha256sum's format", p, sc.Text())
		}
		sums[m[2]] = m[1]
	}
	return sums
}
