package install

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/test/testenv"
)

// grant is one verb on one resource (resource/subresource) of one API group:
// the unit RBAC rules, client calls and the docs' table are compared in.
type grant struct{ group, resource, verb string }

func (g grant) String() string {
	group := g.group
	if group == "" {
		group = `""`
	}
	return group + " " + g.resource + " " + g.verb
}

// clientResources maps a typed client's resource accessor (kube.CoreV1().Pods)
// to its API group and resource. A call on an accessor missing here fails
// the test: a new client call needs its row, and then its RBAC rule.
var clientResources = map[string]struct{ group, resource string }{
	"Pods":             {"", "pods"},
	"Events":           {"", "events"},
	"Secrets":          {"", "secrets"},
	"ConfigMaps":       {"", "configmaps"},
	"ServiceAccounts":  {"", "serviceaccounts"},
	"ReplicaSets":      {"apps", "replicasets"},
	"EndpointSlices":   {"discovery.k8s.io", "endpointslices"},
	"VirtualServices":  {"networking.istio.io", "virtualservices"},
	"DestinationRules": {"networking.istio.io", "destinationrules"},
	"Rollouts":         {"argoproj.io", "rollouts"},
	"AnalysisRuns":     {"argoproj.io", "analysisruns"},
}

// clientVerbs maps a typed client method to its RBAC verb and subresource
// (Patch's subresource is its sixth argument, read from the call).
var clientVerbs = map[string]struct{ verb, subresource string }{
	"Get":              {"get", ""},
	"List":             {"list", ""},
	"Watch":            {"watch", ""},
	"Create":           {"create", ""},
	"Update":           {"update", ""},
	"UpdateStatus":     {"update", "status"},
	"Patch":            {"patch", ""},
	"Apply":            {"patch", ""},
	"ApplyStatus":      {"patch", "status"},
	"Delete":           {"delete", ""},
	"DeleteCollection": {"deletecollection", ""},
	"CreateToken":      {"create", "token"},
}

// groupVersionAccessor starts a typed client chain: kube.CoreV1().Pods(ns)…
var groupVersionAccessor = regexp.MustCompile(`\.(CoreV1|AppsV1|DiscoveryV1|NetworkingV1|ArgoprojV1alpha1|CoordinationV1|BatchV1|PolicyV1|RbacV1)\(\)\.(\w+)\(`)

// clientCalls finds the typed client calls in one Go file: a chain
// `x.CoreV1().Pods(ns).List(…)`, or an accessor kept in a variable
// (`pods := y.kube.CoreV1().Pods(ns)`) and called later (`pods.Get(…)`).
// Each call is reported as the grant it needs, with where it is.
func clientCalls(file string, src []byte) (map[grant][]string, []error) {
	calls := map[grant][]string{}
	var errs []error
	where := func(off int) string {
		return fmt.Sprintf("%s:%d", file, bytes.Count(src[:off], []byte("\n"))+1)
	}
	record := func(accessor, method string, args []string, off int) {
		res, ok := clientResources[accessor]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: a client call on %s, which clientResources does not map to an API resource", where(off), accessor))
			return
		}
		v, ok := clientVerbs[method]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s.%s, a method clientVerbs does not map to an RBAC verb", where(off), accessor, method))
			return
		}
		sub := v.subresource
		if method == "Patch" && len(args) > 5 {
			lit := strings.TrimSpace(args[5])
			if !strings.HasPrefix(lit, `"`) || !strings.HasSuffix(lit, `"`) || len(args) > 6 {
				errs = append(errs, fmt.Errorf("%s: %s.Patch's subresource %q is not one string literal", where(off), accessor, strings.Join(args[5:], ",")))
				return
			}
			sub = strings.Trim(lit, `"`)
		}
		r := res.resource
		if sub != "" {
			r += "/" + sub
		}
		g := grant{res.group, r, v.verb}
		calls[g] = append(calls[g], where(off))
	}
	for _, m := range groupVersionAccessor.FindAllSubmatchIndex(src, -1) {
		accessor := string(src[m[4]:m[5]])
		end, _, ok := balanced(src, m[1]-1)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: unbalanced parentheses after %s(", where(m[0]), accessor))
			continue
		}
		if method := regexp.MustCompile(`^\.(\w+)\(`).FindSubmatch(src[end:]); method != nil {
			_, args, ok := balanced(src, end+len(method[0])-1)
			if !ok {
				errs = append(errs, fmt.Errorf("%s: unbalanced parentheses in %s.%s(", where(m[0]), accessor, method[1]))
				continue
			}
			record(accessor, string(method[1]), args, m[0])
			continue
		}
		// The accessor kept in a variable: `name := …` or `name = …` on its line.
		lineStart := bytes.LastIndexByte(src[:m[0]], '\n') + 1
		assign := regexp.MustCompile(`^\s*(\w+)\s*:?=\s*[\w.]+$`).FindSubmatch(src[lineStart:m[0]])
		if assign == nil {
			errs = append(errs, fmt.Errorf("%s: %s accessor neither called nor kept in a variable: the scanner cannot tell its verbs", where(m[0]), accessor))
			continue
		}
		uses := regexp.MustCompile(`\b` + regexp.QuoteMeta(string(assign[1])) + `\.(\w+)\(`)
		found := false
		for _, u := range uses.FindAllSubmatchIndex(src, -1) {
			_, args, ok := balanced(src, u[1]-1)
			if !ok {
				continue
			}
			record(accessor, string(src[u[2]:u[3]]), args, u[0])
			found = true
		}
		if !found {
			errs = append(errs, fmt.Errorf("%s: %s kept in %s but never called", where(m[0]), accessor, assign[1]))
		}
	}
	return calls, errs
}

// balanced reads the parenthesised argument list opening at src[open]: the
// offset after its closing parenthesis and its top-level arguments. String
// and rune literals are skipped whole.
func balanced(src []byte, open int) (end int, args []string, ok bool) {
	depth, start := 0, open+1
	for i := open; i < len(src); i++ {
		switch c := src[i]; c {
		case '"', '`', '\'':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			i = j
		case '(', '{', '[':
			depth++
		case ')', '}', ']':
			depth--
			if depth == 0 {
				if a := strings.TrimSpace(string(src[start:i])); a != "" {
					args = append(args, a)
				}
				return i + 1, args, true
			}
		case ',':
			if depth == 1 {
				args = append(args, strings.TrimSpace(string(src[start:i])))
				start = i + 1
			}
		}
	}
	return 0, nil, false
}

// pluginCalls scans the non-test Go files of every package of this module
// that the plugins link (go list -deps ./rollouts): what the Argo Rollouts
// controller's ServiceAccount must be allowed.
func pluginCalls(t *testing.T, root string) map[grant][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{range .GoFiles}} {{$.Dir}}/{{.}}{{end}}{{end}}`, "./rollouts")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./rollouts: %v", err)
	}
	calls := map[grant][]string{}
	files := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "github.com/danki-dev/danki/") {
			continue
		}
		for _, path := range fields[1:] {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, path)
			found, errs := clientCalls(rel, src)
			for _, err := range errs {
				t.Error(err)
			}
			for g, at := range found {
				calls[g] = append(calls[g], at...)
			}
			files++
		}
	}
	if files < 20 {
		t.Fatalf("scanned %d files of the plugins' packages: is go list's output read wrong?", files)
	}
	return calls
}

// grants expands RBAC rules into grants (resourceNames aside: they narrow a
// grant, the scanner cannot see names).
func grants(rules []rbacv1.PolicyRule) map[grant]bool {
	out := map[grant]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out[grant{g, res, v}] = true
				}
			}
		}
	}
	return out
}

// roleRules reads the rules of the ClusterRole or Role named name of kind
// from a multi-document YAML stream.
func roleRules(t *testing.T, stream []byte, kind, name string) []rbacv1.PolicyRule {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var obj struct {
			Kind     string
			Metadata struct{ Name string }
			Rules    []rbacv1.PolicyRule
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == kind && obj.Metadata.Name == name {
			return obj.Rules
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// docsTable reads docs/install.md's RBAC table of danki-plugins: API group,
// resource, verbs in its first three columns.
func docsTable(t *testing.T, root string) map[grant]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[grant]bool{}
	in := false
	code := regexp.MustCompile("`([^`]*)`")
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "| API group | resource | verbs |"):
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		case strings.HasPrefix(line, "|---"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			t.Fatalf("docs/install.md RBAC row %q: fewer than 3 cells", line)
		}
		g, r := code.FindStringSubmatch(cells[0]), code.FindStringSubmatch(cells[1])
		if g == nil || r == nil {
			t.Fatalf("docs/install.md RBAC row %q: the group and resource are not in backticks", line)
		}
		group := g[1]
		if group == `""` {
			group = ""
		}
		for _, v := range strings.Split(cells[2], ",") {
			out[grant{group, r[1], strings.TrimSpace(v)}] = true
		}
	}
	if len(out) < 5 {
		t.Fatalf("read %d grants from docs/install.md's RBAC table: did its header change?", len(out))
	}
	return out
}

func renderChart(t *testing.T, root string, args ...string) []byte {
	t.Helper()
	path, err := exec.Command(filepath.Join(root, "hack", "helm.sh"), "--path").Output()
	if err != nil {
		t.Fatalf("hack/helm.sh --path (builds helm): %v", err)
	}
	cmd := exec.Command(strings.TrimSpace(string(path)), append([]string{"template", "danki", filepath.Join(root, "deploy", "helm", "danki"),
		"--namespace", "danki-gate", "--kube-version", "1.34.4"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	return out
}

func sorted(m map[grant]bool) []string {
	var out []string
	for g := range m {
		out = append(out, g.String())
	}
	slices.Sort(out)
	return out
}

// diff says which grants are in a and not b ("a only") and the reverse.
func diff(a, b map[grant]bool) (onlyA, onlyB []string) {
	for g := range a {
		if !b[g] {
			onlyA = append(onlyA, g.String())
		}
	}
	for g := range b {
		if !a[g] {
			onlyB = append(onlyB, g.String())
		}
	}
	slices.Sort(onlyA)
	slices.Sort(onlyB)
	return onlyA, onlyB
}

// TestPluginRBACIsWhatTheCodeCalls: the ClusterRole danki-plugins plus the
// Role danki-mesh-identity (deploy/rbac) grant every call the plugins' code
// makes and nothing else; the chart renders the same rules; docs/install.md's
// table lists danki-plugins' rules exactly.
func TestPluginRBACIsWhatTheCodeCalls(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(rel string) []byte {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	clusterRole := grants(roleRules(t, read("deploy/rbac/clusterrole.yaml"), "ClusterRole", "danki-plugins"))
	meshRole := grants(roleRules(t, read("deploy/rbac/mesh-identity.yaml"), "Role", "danki-mesh-identity"))

	calls := pluginCalls(t, root)
	called := map[grant]bool{}
	for g := range calls {
		called[g] = true
	}
	granted := map[grant]bool{}
	for g := range clusterRole {
		granted[g] = true
	}
	for g := range meshRole {
		if clusterRole[g] {
			t.Errorf("%s is granted by both danki-plugins and danki-mesh-identity", g)
		}
		granted[g] = true
	}
	missing, extra := diff(called, granted)
	for _, g := range missing {
		var at []string
		for c, where := range calls {
			if c.String() == g {
				at = where
			}
		}
		t.Errorf("the plugins call %s (%s), deploy/rbac does not grant it", g, strings.Join(at, ", "))
	}
	for _, g := range extra {
		t.Errorf("deploy/rbac grants %s, no call in the plugins' code needs it", g)
	}

	chart := renderChart(t, root, "--show-only", "templates/plugins-rbac.yaml", "--show-only", "templates/plugins-mesh-identity.yaml")
	for _, c := range []struct {
		kind, name string
		want       map[grant]bool
	}{{"ClusterRole", "danki-plugins", clusterRole}, {"Role", "danki-mesh-identity", meshRole}} {
		onlyChart, onlyDeploy := diff(grants(roleRules(t, chart, c.kind, c.name)), c.want)
		if len(onlyChart) > 0 || len(onlyDeploy) > 0 {
			t.Errorf("the chart's %s %s: grants %v that deploy/rbac does not, lacks %v", c.kind, c.name, onlyChart, onlyDeploy)
		}
	}

	onlyDocs, onlyRole := diff(docsTable(t, root), clusterRole)
	if len(onlyDocs) > 0 || len(onlyRole) > 0 {
		t.Errorf("docs/install.md's RBAC table lists %v that danki-plugins does not grant, and leaves out %v", onlyDocs, onlyRole)
	}
	t.Logf("the plugins call %v", sorted(called))
}

// TestClientCallScanner: the scanner finds a chained call, a call spread
// over lines with its subresource, an accessor kept in a variable, a token
// request; and it refuses what it cannot map, so a new kind of call fails
// the RBAC test instead of slipping past it.
func TestClientCallScanner(t *testing.T) {
	src := []byte(`package x
func f() {
	pods, err := kube.CoreV1().Pods(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	_, err = a.argo.ArgoprojV1alpha1().Rollouts(ns).Patch(ctx, name, k8stypes.MergePatchType,
		[]byte(` + "`" + `{"status":{"abort":true}}` + "`" + `), metav1.PatchOptions{}, "status")
	rs := y.kube.AppsV1().ReplicaSets(y.namespace)
	cur, err := rs.Get(ctx, name, metav1.GetOptions{})
	_, err = rs.Patch(ctx, name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "scale")
	tr, err := s.Client.CoreV1().ServiceAccounts(s.Namespace).CreateToken(ctx, s.Name, req, metav1.CreateOptions{})
}
`)
	calls, errs := clientCalls("x.go", src)
	for _, err := range errs {
		t.Error(err)
	}
	var got []string
	for g := range calls {
		got = append(got, g.String())
	}
	slices.Sort(got)
	want := []string{`"" pods list`, `"" serviceaccounts/token create`, "apps replicasets get", "apps replicasets/scale patch", "argoproj.io rollouts/status patch"}
	if !slices.Equal(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}
	if at := calls[grant{"apps", "replicasets", "get"}]; len(at) != 1 || at[0] != "x.go:7" {
		t.Errorf("replicasets get found at %v, want x.go:7", at)
	}

	for name, bad := range map[string]string{
		"unmapped resource":    `x.CoreV1().Nodes().List(ctx, o)`,
		"unmapped method":      `x.CoreV1().Pods(ns).Evict(ctx, e)`,
		"accessor passed away": `use(x.CoreV1().Pods(ns))`,
		"variable subresource": `x.CoreV1().Pods(ns).Patch(ctx, n, t, b, o, sub)`,
	} {
		if _, errs := clientCalls("bad.go", []byte("package x\nfunc f() {\n\t"+bad+"\n}\n")); len(errs) == 0 {
			t.Errorf("%s: %s accepted without an error", name, bad)
		}
	}
}
