package runner

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The lab's sidecar injector: a mutating admission webhook, as istiod's,
// so pods in namespaces labelled istio-injection=enabled look injected in
// the API (the tlsMode label Istio's clients use to pick mTLS, the
// sidecar.istio.io/status annotation and an istio-proxy container) and the
// runner finds what to run. Only pods with a container the runner runs (an
// image it maps to a command) get a sidecar; sidecar.istio.io/inject:
// "false" opts out. The proxy's CPU and memory count in the pod's budget.

// InjectorWebhookName is the MutatingWebhookConfiguration the runner
// registers while it serves the injector.
const InjectorWebhookName = "danki-lab-sidecar-injector"

// Injected container's resources: Istio's defaults are 100m/128Mi requests
// and 2/1Gi limits; a lab sidecar (~40 MB agent + ~70 MB Envoy, one worker
// thread) needs less. With limits on every container the pod keeps a pod
// level CPU quota and memory limit, as before injection.
var proxyResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
}

// injectPatch returns the JSON patch that injects pod, or nil when it gets
// no sidecar.
func (r *Runner) injectPatch(pod *corev1.Pod) ([]byte, error) {
	if pod.Annotations[injectAnno] == "false" || pod.Spec.HostNetwork {
		return nil, nil
	}
	runs := false
	for _, c := range pod.Spec.Containers {
		if c.Name == ProxyContainer {
			return nil, nil // injected already
		}
		if _, _, ok, err := r.cfg.Images.lookup(c.Image); err == nil && ok {
			runs = true
		}
	}
	if !runs {
		return nil, nil // nothing runs: nothing to proxy
	}
	labels := map[string]string{}
	for k, v := range pod.Labels {
		labels[k] = v
	}
	labels[tlsModeLabel] = "istio"
	if _, ok := labels["service.istio.io/canonical-name"]; !ok {
		name := labels["app"]
		if name == "" {
			name = workloadName(pod)
		}
		labels["service.istio.io/canonical-name"] = name
	}
	if _, ok := labels["service.istio.io/canonical-revision"]; !ok {
		rev := labels["version"]
		if rev == "" {
			rev = "latest"
		}
		labels["service.istio.io/canonical-revision"] = rev
	}
	annotations := map[string]string{}
	for k, v := range pod.Annotations {
		annotations[k] = v
	}
	annotations[statusAnno] = `{"containers":["istio-proxy"],"initContainers":null,"volumes":null,"imagePullSecrets":null,"revision":"danki-lab"}`
	proxy := corev1.Container{
		Name: ProxyContainer, Image: ProxyImage, Args: []string{"proxy", "sidecar"},
		Resources: *proxyResources.DeepCopy(),
	}
	ops := []map[string]any{
		{"op": "add", "path": "/metadata/labels", "value": labels},
		{"op": "add", "path": "/metadata/annotations", "value": annotations},
		{"op": "add", "path": "/spec/containers/-", "value": proxy},
	}
	return json.Marshal(ops)
}

func (r *Runner) serveInject(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 4<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("want an admission.k8s.io/v1 AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	var pod corev1.Pod
	if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Message: "lab sidecar injector: decode pod: " + err.Error()}
	} else if pod.Namespace == "" {
		pod.Namespace = review.Request.Namespace
	}
	if resp.Allowed {
		patch, err := r.injectPatch(&pod)
		switch {
		case err != nil:
			resp.Allowed = false
			resp.Result = &metav1.Status{Message: "lab sidecar injector: " + err.Error()}
		case patch != nil:
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
			r.log.Info("sidecar injected", "pod", pod.Namespace+"/"+pod.Name+pod.GenerateName)
		}
	}
	review.Response = resp
	review.Request = nil
	out, err := json.Marshal(review)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// runInjector serves the injection webhook on Mesh.InjectAddr with a
// self-signed certificate for its IP, registers it with the API server,
// and unregisters it when ctx ends (a webhook nobody serves would fail
// every pod creation in the injected namespaces). It returns once the
// webhook is registered; errors after that are logged.
func (r *Runner) runInjector(ctx context.Context) (stopped <-chan struct{}, err error) {
	addr := r.cfg.Mesh.InjectAddr
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("sidecar injector address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("sidecar injector address %q: want IP:PORT (the API server dials it)", addr)
	}
	certPEM, cert, err := selfSigned(ip)
	if err != nil {
		return nil, err
	}
	ln, err := tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, fmt.Errorf("sidecar injector: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/inject", r.serveInject)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("sidecar injector stopped", "err", err)
		}
	}()
	fail, none, timeout := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, int32(5)
	url := "https://" + addr + "/inject"
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: InjectorWebhookName, Labels: map[string]string{"app.kubernetes.io/managed-by": "danki-lab-runner"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "sidecar-injector.lab.danki.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: certPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{injectLabel: "enabled"}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	hooks := r.cfg.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	_, err = hooks.Create(ctx, cfg, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, gerr := hooks.Get(ctx, InjectorWebhookName, metav1.GetOptions{})
		if gerr != nil {
			err = gerr
		} else {
			cfg.ResourceVersion = old.ResourceVersion
			_, err = hooks.Update(ctx, cfg, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("register the sidecar injector (MutatingWebhookConfiguration %s): %w", InjectorWebhookName, err)
	}
	r.log.Info("sidecar injector serving", "url", url, "namespaces", injectLabel+"=enabled")
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		<-ctx.Done()
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hooks.Delete(dctx, InjectorWebhookName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			r.log.Warn("unregister the sidecar injector", "err", err)
		}
		_ = srv.Shutdown(dctx)
		<-done
	}()
	return stop, nil
}

// selfSigned makes a certificate for ip, valid a year: the webhook's, with
// itself as the CA bundle the API server trusts.
func selfSigned(ip net.IP) (certPEM []byte, cert tls.Certificate, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "danki-lab sidecar injector"},
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{ip}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, cert, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, cert, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err = tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return certPEM, cert, err
}
