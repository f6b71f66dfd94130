package shift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/danki-dev/danki/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ExtraSubset is a DestinationRule subset for an additional destination: it
// selects the pods whose rollouts-pod-template-hash is Hash.
type ExtraSubset struct {
	Name string
	Hash string
}

// UpdateHashes keeps the DestinationRule's subsets selecting the right
// ReplicaSets, as Argo's native Istio router does: the canary and stable
// subsets get the rollouts-pod-template-hash label of the canary and stable
// ReplicaSet (an empty hash removes the label), and each extra gets a subset
// of its own (added when missing). Subsets danki added for extras no longer
// asked for are removed; every other subset and field stays as it was. It
// does nothing for host-level routing.
func (s *Shifter) UpdateHashes(ctx context.Context, t Target, canaryHash, stableHash string, extras ...ExtraSubset) error {
	if t.Subsets == nil {
		return nil
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("update subset hashes: %w", err)
	}
	for i, e := range extras {
		if e.Name == "" {
			return fmt.Errorf("update subset hashes: additional subsets[%d]: name required", i)
		}
		if e.Name == t.Subsets.StableSubset || e.Name == t.Subsets.CanarySubset {
			return fmt.Errorf("update subset hashes: additional subsets[%d] %q: is the stable or canary subset itself", i, e.Name)
		}
	}
	ns, name := t.drNamespace(), t.Subsets.DestinationRule
	_, err := updateWithRetry(ctx, s, objectIO[networkingv1.DestinationRule, *networkingv1.DestinationRule]{
		ref: "DestinationRule " + ns + "/" + name,
		get: func(ctx context.Context) (*networkingv1.DestinationRule, error) { return s.getDR(ctx, t) },
		put: func(ctx context.Context, dr *networkingv1.DestinationRule) (*networkingv1.DestinationRule, error) {
			return s.client.NetworkingV1().DestinationRules(ns).Update(ctx, dr, metav1.UpdateOptions{})
		},
		spec: func(dr *networkingv1.DestinationRule) proto.Message { return &dr.Spec },
	}, "update subset hashes", func(dr *networkingv1.DestinationRule) error {
		return setSubsetHashes(dr, t.Subsets, canaryHash, stableHash, extras)
	})
	if err != nil {
		return err
	}
	s.log.Info("updated subset hashes", "destinationRule", ns+"/"+name, "canary", canaryHash, "stable", stableHash, "extras", len(extras))
	return nil
}

func setSubsetHashes(dr *networkingv1.DestinationRule, cfg *Subsets, canaryHash, stableHash string, extras []ExtraSubset) error {
	var added []string
	if raw := dr.Annotations[wellknown.ExtraSubsetsAnnotation]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &added); err != nil {
			return fmt.Errorf("annotation %s on DestinationRule %s/%s: %w: fix or delete the annotation", wellknown.ExtraSubsetsAnnotation, dr.Namespace, dr.Name, err)
		}
	}
	setHash := func(sub *networking.Subset, hash string) { setOrDelete(&sub.Labels, PodTemplateHashLabel, hash) }
	var errs []error
	for _, want := range []struct{ role, name, hash string }{{"canary", cfg.CanarySubset, canaryHash}, {"stable", cfg.StableSubset, stableHash}} {
		i := slices.IndexFunc(dr.Spec.Subsets, func(s *networking.Subset) bool { return s.GetName() == want.name })
		if i < 0 {
			errs = append(errs, fmt.Errorf("DestinationRule %s/%s: spec.subsets has no subset named %q (the %s subset): add it, or fix the %s subset name", dr.Namespace, dr.Name, want.name, want.role, want.role))
			continue
		}
		setHash(dr.Spec.Subsets[i], want.hash)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var nowAdded []string
	for _, e := range extras {
		i := slices.IndexFunc(dr.Spec.Subsets, func(s *networking.Subset) bool { return s.GetName() == e.Name })
		if i < 0 {
			dr.Spec.Subsets = append(dr.Spec.Subsets, &networking.Subset{Name: e.Name})
			i = len(dr.Spec.Subsets) - 1
			nowAdded = append(nowAdded, e.Name)
		} else if slices.Contains(added, e.Name) {
			nowAdded = append(nowAdded, e.Name)
		}
		setHash(dr.Spec.Subsets[i], e.Hash)
	}
	dr.Spec.Subsets = slices.DeleteFunc(dr.Spec.Subsets, func(s *networking.Subset) bool {
		return slices.Contains(added, s.GetName()) && !slices.Contains(nowAdded, s.GetName())
	})
	value := ""
	if len(nowAdded) > 0 {
		b, _ := json.Marshal(nowAdded)
		value = string(b)
	}
	setAnnotation(&dr.ObjectMeta, wellknown.ExtraSubsetsAnnotation, value)
	return nil
}
