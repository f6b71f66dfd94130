package shift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/danki-dev/danki/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// Annotations danki keeps on the objects it manages.
const (
	// PodTemplateHashLabel is the label Argo Rollouts puts on every pod of a
	// ReplicaSet; subset-level routing selects the stable and canary pods by
	// it.
	PodTemplateHashLabel = "rollouts-pod-template-hash"
)

// Shifter reads and changes weights on VirtualServices. It is safe for
// concurrent use: it keeps no state between calls; everything lives on the
// objects, and every write is an optimistic-concurrency Update.
type Shifter struct {
	client istioclient.Interface
	log    *slog.Logger
	// Backoff paces retries after a 409 Conflict; each retry reads the
	// object afresh. The default is client-go's retry.DefaultRetry (5 tries).
	Backoff wait.Backoff
}

// New returns a Shifter over an Istio clientset. A nil logger discards logs.
func New(client istioclient.Interface, log *slog.Logger) *Shifter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Shifter{client: client, log: log, Backoff: retry.DefaultRetry}
}

// ErrNotFound is wrapped by errors about a VirtualService or DestinationRule
// that does not exist.
var ErrNotFound = errors.New("not found")

func (s *Shifter) getVS(ctx context.Context, t Target) (*networkingv1.VirtualService, error) {
	vs, err := s.client.NetworkingV1().VirtualServices(t.Namespace).Get(ctx, t.VirtualService, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("VirtualService %s %w: create it, or fix the virtual service name/namespace", t, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read VirtualService %s: %w", t, err)
	}
	return vs, nil
}

func (t Target) drNamespace() string {
	if t.Subsets != nil && t.Subsets.Namespace != "" {
		return t.Subsets.Namespace
	}
	return t.Namespace
}

func (s *Shifter) getDR(ctx context.Context, t Target) (*networkingv1.DestinationRule, error) {
	ns, name := t.drNamespace(), t.Subsets.DestinationRule
	dr, err := s.client.NetworkingV1().DestinationRules(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("DestinationRule %s/%s %w: create it, or fix the destination rule name", ns, name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read DestinationRule %s/%s: %w", ns, name, err)
	}
	return dr, nil
}

// matcher builds the destination classifier for t. Subset-level routing
// reads the DestinationRule for its host.
func (s *Shifter) matcher(ctx context.Context, t Target) (*matcher, error) {
	m := &matcher{ns: t.Namespace, stableHost: t.StableHost, canaryHost: t.CanaryHost}
	if t.Subsets != nil {
		dr, err := s.getDR(ctx, t)
		if err != nil {
			return nil, err
		}
		if dr.Spec.GetHost() == "" {
			return nil, fmt.Errorf("DestinationRule %s/%s: spec.host is empty: set it to the Service the subsets belong to", dr.Namespace, dr.Name)
		}
		m.subset = true
		m.host = dr.Spec.GetHost()
		if dr.Namespace != t.Namespace && !strings.Contains(m.host, ".") {
			// A short host resolves in the DestinationRule's namespace.
			m.host += "." + dr.Namespace
		}
		m.stableSubset, m.canarySubset = t.Subsets.StableSubset, t.Subsets.CanarySubset
	}
	return m, nil
}

// staleExtras reads the additional destinations danki added earlier.
func staleExtras(vs *networkingv1.VirtualService) ([]Extra, error) {
	raw, ok := vs.Annotations[wellknown.ExtrasAnnotation]
	if !ok || raw == "" {
		return nil, nil
	}
	var out []Extra
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("annotation %s on VirtualService %s/%s: %w: fix or delete the annotation", wellknown.ExtrasAnnotation, vs.Namespace, vs.Name, err)
	}
	return out, nil
}

func setAnnotation(obj *metav1.ObjectMeta, key, value string) {
	setOrDelete(&obj.Annotations, key, value)
}

// setOrDelete sets key to value in the map, or deletes it for an empty
// value, creating the map only when something is set.
func setOrDelete(m *map[string]string, key, value string) {
	if value == "" {
		delete(*m, key)
		return
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[key] = value
}

// update changes t's VirtualService with updateWithRetry.
func (s *Shifter) update(ctx context.Context, t Target, what string, mutate func(vs *networkingv1.VirtualService) error) (*networkingv1.VirtualService, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return updateWithRetry(ctx, s, objectIO[networkingv1.VirtualService, *networkingv1.VirtualService]{
		ref: "VirtualService " + t.String(),
		get: func(ctx context.Context) (*networkingv1.VirtualService, error) { return s.getVS(ctx, t) },
		put: func(ctx context.Context, vs *networkingv1.VirtualService) (*networkingv1.VirtualService, error) {
			return s.client.NetworkingV1().VirtualServices(t.Namespace).Update(ctx, vs, metav1.UpdateOptions{})
		},
		spec: func(vs *networkingv1.VirtualService) proto.Message { return &vs.Spec },
	}, what, mutate)
}

// applyWeights sets the canary weight and extras on every managed route of
// vs (primary and mirror routes) and records the extras. m must be fresh.
func applyWeights(vs *networkingv1.VirtualService, t Target, m *matcher, canary int, extras []Extra) error {
	if err := validateExtras(canary, extras); err != nil {
		return err
	}
	stale, err := staleExtras(vs)
	if err != nil && (canary != 0 || len(extras) > 0) {
		return err
	}
	// Going to 0 with nothing extra (an abort) must not depend on stored
	// state: a corrupt extras annotation is dropped (rewritten below) and
	// the routes are judged as they stand.
	mm := m.withExtras(extras, stale)
	for _, e := range mm.extras {
		if r, _ := m.classify(&networking.Destination{Host: e.Host, Subset: e.Subset}); r == roleStable || r == roleCanary {
			return fmt.Errorf("additional destination %s: is the %s destination itself: additional destinations must be other services/subsets", e, r)
		}
	}
	routes, err := primaryRoutes(&vs.Spec, t, mm)
	if err != nil {
		return err
	}
	routes = append(routes, mirrorRoutes(&vs.Spec, t, mm)...)
	var errs []error
	for _, r := range routes {
		errs = append(errs, reweigh(&vs.Spec, r, mm, canary, mm.extras))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var added []Extra
	for _, e := range mm.extras {
		added = append(added, Extra{Host: e.Host, Subset: e.Subset})
	}
	value := ""
	if len(added) > 0 {
		b, _ := json.Marshal(added)
		value = string(b)
	}
	setAnnotation(&vs.ObjectMeta, wellknown.ExtrasAnnotation, value)
	return nil
}

// SetWeight sets the canary weight (percent) on every managed route at once,
// with the stable destination taking the rest after any additional
// destinations. It is a direct jump, not a ramp; weight 0 (abort) also
// clears the ramp state.
func (s *Shifter) SetWeight(ctx context.Context, t Target, canary int, extras ...Extra) error {
	_, err := s.update(ctx, t, fmt.Sprintf("set canary weight %d", canary), func(vs *networkingv1.VirtualService) error {
		m, err := s.matcher(ctx, t)
		if err != nil {
			return err
		}
		if err := applyWeights(vs, t, m, canary, extras); err != nil {
			return err
		}
		if canary == 0 {
			setAnnotation(&vs.ObjectMeta, wellknown.RampAnnotation, "")
		}
		return nil
	})
	if err == nil {
		s.log.Info("set canary weight", "virtualService", t.String(), "canary", canary, "extras", len(extras))
	}
	return err
}
