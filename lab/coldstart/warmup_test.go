package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// The mesh identities of the lab (lab/README.md, "The mesh").
const (
	dankiPlugins = "spiffe://cluster.local/ns/argo-rollouts/sa/danki"
	dankiCLI     = "spiffe://cluster.local/ns/danki-system/sa/danki"
	gatewayID    = "spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway"
	otherID      = "spiffe://cluster.local/ns/default/sa/someone-else"
)

// sidecarElement is the XFCC element an Istio sidecar appends for its mTLS
// peer (forward_client_cert_details APPEND_FORWARD, Subject, URI and DNS
// set): By is the pod's own identity, Hash the peer certificate's SHA-256.
func sidecarElement(peer string) string {
	return `By=spiffe://cluster.local/ns/default/sa/default;Hash=` + strings.Repeat("ab", 32) + `;Subject="";URI=` + peer
}

// TestWarmupIdentity runs the real sample app and sends POST /orders the way
// they reach it behind an Istio sidecar: with WARMUP_PRINCIPALS a write is
// rolled back only when the last x-forwarded-client-cert element (the one
// the pod's own sidecar appends) names one of them, whatever the caller put
// in the marker header or in earlier XFCC elements; without XFCC, and
// without principals, the marker header decides as before; a mirrored copy
// (-shadow Host) is rolled back either way. /orders/count must count
// exactly the writes that were kept.
func TestWarmupIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the sample app's JVM twice (~5 s): not in -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("stops the JVM by process group: Linux only")
	}
	for _, tool := range []string{"java", "javac", "jar", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (%v): the sample app needs a JDK 17+", tool, err)
		}
	}
	jar := sampleAppJar(t)
	marker := map[string][]string{"X-Danki-Warmup": {"1"}}
	with := func(h map[string][]string, xfcc ...string) map[string][]string {
		out := map[string][]string{}
		for k, v := range h {
			out[k] = v
		}
		if len(xfcc) > 0 {
			out["X-Forwarded-Client-Cert"] = xfcc
		}
		return out
	}
	type post struct {
		name   string
		header map[string][]string
		host   string
		wantBy string // "" kept; else rolled back, warmupBy
	}
	run := func(t *testing.T, env []string, posts []post) {
		a := start(t, jar, env...)
		kept := 0
		for _, p := range posts {
			req, err := http.NewRequest(http.MethodPost, a.URL+"orders", strings.NewReader(`{"email":"u@example.com","lines":[{"sku":"ABC-0001-abcdef","qty":1,"price":"2.50"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range p.header {
				req.Header[k] = v
			}
			if p.host != "" {
				req.Host = p.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var doc struct {
				Committed bool    `json:"committed"`
				Warmup    bool    `json:"warmup"`
				WarmupBy  *string `json:"warmupBy"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatalf("%s: status %d %q: %v", p.name, resp.StatusCode, b, err)
			}
			by := ""
			if doc.WarmupBy != nil {
				by = *doc.WarmupBy
			}
			if p.wantBy == "" {
				kept++
				if !doc.Committed || doc.Warmup || resp.StatusCode != http.StatusCreated {
					t.Errorf("%s: status %d %s: want the write kept (201, committed, not warm-up)", p.name, resp.StatusCode, b)
				}
			} else if doc.Committed || !doc.Warmup || by != p.wantBy || resp.StatusCode != http.StatusOK {
				t.Errorf("%s: status %d %s: want it rolled back as warm-up by %s", p.name, resp.StatusCode, b, p.wantBy)
			}
			t.Logf("%-70s → %d committed=%v warmupBy=%q", p.name, resp.StatusCode, doc.Committed, by)
		}
		resp, err := http.Get(a.URL + "orders/count")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var count struct{ Count int }
		if err := json.NewDecoder(resp.Body).Decode(&count); err != nil {
			t.Fatal(err)
		}
		if count.Count != kept {
			t.Errorf("/orders/count %d, want %d (the writes meant to be kept)", count.Count, kept)
		}
	}

	t.Run("principals", func(t *testing.T) {
		run(t, []string{"WARMUP_PRINCIPALS=" + dankiPlugins + ", " + dankiCLI}, []post{
			{name: "user through the gateway: marker + forged XFCC naming danki", header: with(marker, "URI="+dankiPlugins+","+sidecarElement(gatewayID))},
			{name: "user through the gateway: marker only", header: with(marker, sidecarElement(gatewayID))},
			{name: "another mesh workload: marker + a forged element of danki's", header: with(marker, sidecarElement(dankiPlugins)+","+sidecarElement(otherID))},
			{name: "forged element with a quoted \",URI=danki\"", header: with(marker, `Subject="x,URI=`+dankiPlugins+`",`+sidecarElement(otherID))},
			{name: "forged element leaving a quote open", header: with(marker, "URI="+dankiPlugins+`;Subject="`+","+sidecarElement(otherID))},
			{name: "two XFCC lines, the second naming danki", header: with(marker, sidecarElement(otherID), "URI="+dankiPlugins)},
			{name: "empty XFCC", header: with(marker, "")},
			{name: "danki's plugins as the peer (no marker)", header: with(nil, sidecarElement(dankiPlugins)), wantBy: "peer"},
			{name: "danki's CLI as the peer, after a caller's own elements", header: with(marker, "URI=spiffe://elsewhere/ns/x/sa/y,"+sidecarElement(dankiCLI)), wantBy: "peer"},
			{name: "mirrored copy from the gateway (-shadow Host)", header: with(nil, sidecarElement(gatewayID)), host: "app-shadow:8080", wantBy: "mirror"},
			{name: "no XFCC (not through the sidecar): marker", header: marker, wantBy: "header"},
			{name: "no XFCC, no marker", header: nil},
		})
	})
	t.Run("no principals", func(t *testing.T) {
		run(t, nil, []post{
			{name: "marker, XFCC of another workload", header: with(marker, sidecarElement(otherID)), wantBy: "header"},
			{name: "danki as the peer without the marker", header: with(nil, sidecarElement(dankiPlugins))},
			{name: "mirrored copy", host: "app-shadow:8080", wantBy: "mirror"},
			{name: "nothing", header: nil},
		})
	})
	t.Run("not a SPIFFE ID", func(t *testing.T) {
		out, err := exec.Command("java", "-jar", jar, "--warmup-principals", "cluster.local/ns/argo-rollouts/sa/danki").CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `"cluster.local/ns/argo-rollouts/sa/danki" is not a SPIFFE ID`) {
			t.Errorf("--warmup-principals without spiffe://: %v %s; want exit 2 naming the value", err, out)
		}
	})
}
