// Command ociarchive writes danki's two images as image archives, one per
// image per linux platform, without a Docker daemon or a registry
// (go-containerregistry), for `kind load image-archive` and `docker load`:
//
//	go run ./hack/ociarchive --dist dist --version v0.1.0 --cp-dir DIR --platforms linux/amd64,linux/arm64
//
// reads dist/danki-<os>-<arch> (hack/release.sh's binaries) and DIR/cp-<os>-<arch>
// (hack/ocicp, built by hack/release.sh) and writes
//
//	dist/images/danki-<os>-<arch>.tar         ghcr.io/danki-dev/danki:VERSION (images/danki/Dockerfile)
//	dist/images/danki-plugin-<os>-<arch>.tar  ghcr.io/danki-dev/danki-plugin:VERSION (images/danki-plugin/Dockerfile)
//
// in docker save's format (manifest.json, the config, gzipped layers).
//
// No base image can be pulled here, so both start from nothing: a first
// layer holds what the Dockerfiles' bases give that danki needs — /etc/passwd
// and /etc/group naming nonroot (65532), /home/nonroot, /tmp (1777) and the
// CA certificates (the build host's /etc/ssl/certs/ca-certificates.crt, when it
// has one: distroless carries Debian's bundle at that path, and danki's TLS
// clients read it) — and a second the binary at /danki (0755, root's). The
// plugin image has no busybox: its cp is hack/ocicp at /bin/cp (PATH=/bin), so
// the init container's `command: [cp, /danki, /danki-bin/danki]` works as with
// the Dockerfile's busybox, and its Cmd is that command.
//
// Reproducible: every file's time and the image's created time are
// SOURCE_DATE_EPOCH (0 when unset), so the same inputs give the same bytes.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// caBundle is where Debian (distroless's base) keeps its CA bundle, read on
// the build host and written at the same path in the image.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// The images' user: distroless's nonroot, numeric so the kubelet can check
// runAsNonRoot.
const (
	uid  = 65532
	user = "65532:65532"
)

// elfMachine: the ELF machine of each GOARCH an image is built for; the
// binaries are checked against it, so an image never claims an architecture
// its binary is not.
var elfMachine = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"386":     elf.EM_386,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

type options struct {
	dist, out, cpDir, version, revision string
	platforms                           []string
	epoch                               time.Time
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err == nil {
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociarchive:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("ociarchive", flag.ContinueOnError)
	fs.StringVar(&o.dist, "dist", "dist", "directory of the release's danki-<os>-<arch> binaries")
	fs.StringVar(&o.out, "out", "", "directory for the archives (default DIST/images)")
	fs.StringVar(&o.cpDir, "cp-dir", "", "directory of hack/ocicp's cp-<os>-<arch> builds (the plugin image's /bin/cp)")
	fs.StringVar(&o.version, "version", "", "the images' tag and org.opencontainers.image.version")
	fs.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision (a commit; none when empty)")
	platforms := fs.String("platforms", "linux/amd64", "comma-separated OS/ARCH list")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.version == "" || o.cpDir == "" || fs.NArg() > 0 {
		return o, fmt.Errorf("--version and --cp-dir are required, and no arguments (got %q)", fs.Args())
	}
	if o.out == "" {
		o.out = filepath.Join(o.dist, "images")
	}
	o.platforms = strings.Split(*platforms, ",")
	epoch, err := sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
	o.epoch = epoch
	return o, err
}

func sourceDateEpoch(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

func run(o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	base, err := baseLayer(o.epoch)
	if err != nil {
		return fmt.Errorf("base layer: %w", err)
	}
	for _, p := range o.platforms {
		goos, arch, ok := strings.Cut(p, "/")
		if !ok || goos != "linux" || elfMachine[arch] == 0 {
			return fmt.Errorf("platform %q: images are built for linux/{amd64,arm64,386,ppc64le,s390x,riscv64}", p)
		}
		for _, img := range []string{"danki", "danki-plugin"} {
			path := filepath.Join(o.out, img+"-"+goos+"-"+arch+".tar")
			if err := writeImage(o, img, goos, arch, base, path); err != nil {
				return fmt.Errorf("%s for %s: %w", img, p, err)
			}
			fmt.Fprintf(os.Stderr, "ociarchive: wrote %s (ghcr.io/danki-dev/%s:%s)\n", path, img, o.version)
		}
	}
	return nil
}

// writeImage builds one image, base layer then its own, and writes it
// tagged ghcr.io/danki-dev/IMG:VERSION to path.
func writeImage(o options, img, goos, arch string, base v1.Layer, path string) error {
	bin, err := readBinary(filepath.Join(o.dist, "danki-"+goos+"-"+arch), arch)
	if err != nil {
		return err
	}
	files := []file{{name: "danki", mode: 0o755, data: bin}}
	cfg := v1.Config{
		User:       user,
		Entrypoint: []string{"/danki"},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		WorkingDir: "/",
		Labels:     labels(o),
	}
	if img == "danki-plugin" {
		cp, err := readBinary(filepath.Join(o.cpDir, "cp-"+goos+"-"+arch), arch)
		if err != nil {
			return err
		}
		files = append(files, file{name: "bin/", mode: 0o755}, file{name: "bin/cp", mode: 0o755, data: cp})
		cfg.Entrypoint = nil
		cfg.Cmd = []string{"cp", "/danki", "/danki-bin/danki"}
		cfg.Env = []string{"PATH=/bin"}
	}
	app, err := layer(files, o.epoch)
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	image, err := assemble(goos, arch, cfg, o.epoch, base, app)
	if err != nil {
		return err
	}
	tag, err := name.NewTag("ghcr.io/danki-dev/" + img + ":" + o.version)
	if err != nil {
		return fmt.Errorf("tag: %w", err)
	}
	if err := tarball.WriteToFile(path, tag, image); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func labels(o options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.source":  "https://github.com/danki-dev/danki",
		"org.opencontainers.image.version": o.version,
	}
	if o.revision != "" {
		l["org.opencontainers.image.revision"] = o.revision
	}
	return l
}

// assemble: the config (platform, cfg, created at epoch) on an empty image,
// then the layers, each with a history entry saying where it came from.
func assemble(goos, arch string, cfg v1.Config, epoch time.Time, base, app v1.Layer) (v1.Image, error) {
	created := v1.Time{Time: epoch}
	image, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		OS:           goos,
		Architecture: arch,
		Created:      created,
		Config:       cfg,
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	image, err = mutate.Append(image,
		mutate.Addendum{Layer: base, History: v1.History{Created: created,
			CreatedBy: "hack/ociarchive: /etc/passwd, /etc/group, /home/nonroot, /tmp, CA certificates"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created,
			CreatedBy: "hack/ociarchive: /danki (and the plugin image's /bin/cp)"}})
	if err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	return mutate.CreatedAt(image, created)
}

// readBinary reads a static binary built for linux/arch: an ELF for that
// machine, or an error.
func readBinary(path, arch string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	e, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: not an ELF binary: %w", path, err)
	}
	defer e.Close()
	if e.Machine != elfMachine[arch] {
		return nil, fmt.Errorf("%s: ELF machine %v, want %v (linux/%s)", path, e.Machine, elfMachine[arch], arch)
	}
	return b, nil
}

// file is one entry of a layer: a directory when name ends in /.
type file struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte
}

func baseLayer(epoch time.Time) (v1.Layer, error) {
	files := []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: uid, gid: uid},
		{name: "tmp/", mode: 0o1777},
	}
	ca, err := os.ReadFile(caBundle)
	switch {
	case err == nil:
		files = append(files, file{name: "etc/ssl/", mode: 0o755}, file{name: "etc/ssl/certs/", mode: 0o755},
			file{name: strings.TrimPrefix(caBundle, "/"), mode: 0o644, data: ca})
	case os.IsNotExist(err):
		fmt.Fprintf(os.Stderr, "ociarchive: no %s on this host: the images have no CA certificates\n", caBundle)
	default:
		return nil, err
	}
	return layer(files, epoch)
}

// layer writes files into an uncompressed tar, every time epoch, owned by
// root unless the file says, and makes it a gzipped layer.
func layer(files []file, epoch time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: epoch,
			Typeflag: tar.TypeReg, Size: int64(len(f.data))}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
}
