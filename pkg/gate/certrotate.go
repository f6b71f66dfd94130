package gate

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PatchCABundle makes the MutatingWebhookConfiguration name trust ours (a
// PEM CA bundle): every webhook's clientConfig.caBundle becomes
// MergeCABundle of what it held and ours. It reads and patches that one
// object only (RBAC: get and patch, resourceNames [name]); a concurrent
// change (another replica) is retried. It reports whether it changed it.
func PatchCABundle(ctx context.Context, c client.Client, name string, ours []byte) (bool, error) {
	for attempt := 0; ; attempt++ {
		var wh admissionv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &wh); err != nil {
			return false, fmt.Errorf("get MutatingWebhookConfiguration %s: %w", name, err)
		}
		old := wh.DeepCopy()
		changed := false
		for i := range wh.Webhooks {
			cc := &wh.Webhooks[i].ClientConfig
			merged, err := MergeCABundle(cc.CABundle, ours, time.Now())
			if err != nil {
				return false, fmt.Errorf("caBundle of MutatingWebhookConfiguration %s: %w", name, err)
			}
			if !bytes.Equal(merged, cc.CABundle) {
				cc.CABundle, changed = merged, true
			}
		}
		if !changed {
			return false, nil
		}
		// The merge patch carries the resourceVersion read: a replica that
		// patched meanwhile makes it fail with a conflict, and the merge is
		// done again on what it wrote.
		err := c.Patch(ctx, &wh, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			return true, nil
		}
		if !apierrors.IsConflict(err) || attempt >= 5 {
			return false, fmt.Errorf("patch caBundle of MutatingWebhookConfiguration %s: %w", name, err)
		}
	}
}

// certRotator renews a self-managed serving certificate at Certs.RenewAt,
// keeps the webhook configuration's caBundle trusting it, and writes the new
// files to dir, where the webhook server's certificate watcher picks them
// up. Each replica renews its own (it needs no leader election).
type certRotator struct {
	dir      string
	hosts    []string
	validity time.Duration
	// patch makes the webhook configuration trust a CA bundle; nil when the
	// gate keeps no webhook configuration current (its caBundle is the
	// operator's, out of cluster).
	patch func(ctx context.Context, bundle []byte) (bool, error)
	// resync is how often the caBundle is checked between renewals: a
	// re-applied webhook configuration, another replica's merge.
	resync time.Duration
	log    *slog.Logger
	// renewed, if set, is told of every renewal (tests).
	renewed func(*Certs)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica serves the webhook with its own certificate.
func (r *certRotator) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (r *certRotator) Start(ctx context.Context) error {
	for {
		cur, err := ReadCerts(r.dir)
		if err != nil {
			return fmt.Errorf("certificate rotation: %w", err)
		}
		wait := time.Until(cur.RenewAt())
		if wait > 0 {
			if r.patch != nil && r.resync > 0 {
				wait = min(wait, r.resync)
			}
			if err := r.syncBundle(ctx, cur.CABundle); err != nil {
				r.log.Error("keep the webhook's caBundle current; retrying", "error", err)
				wait = min(wait, 10*time.Second)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			continue
		}
		if err := r.renew(ctx, cur); err != nil {
			r.log.Error("renew the webhook certificate; retrying", "error", err, "expires", cur.Leaf.NotAfter)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(min(time.Minute, max(time.Until(cur.Leaf.NotAfter)/4, time.Second))):
			}
		}
	}
}

// syncBundle makes sure the webhook configuration still trusts bundle.
func (r *certRotator) syncBundle(ctx context.Context, bundle []byte) error {
	if r.patch == nil {
		return nil
	}
	changed, err := r.patch(ctx, bundle)
	if changed {
		r.log.Info("webhook caBundle patched to trust this replica's CA")
	}
	return err
}

// renew makes a new CA and certificate. The webhook configuration gets the
// new bundle (new CA and old) before the new certificate is served, so the
// API server trusts whichever of the two it meets; the certificate is
// written only once the patch succeeded, unless the old one is about to
// expire anyway.
func (r *certRotator) renew(ctx context.Context, cur *Certs) error {
	next, err := NewCerts(r.hosts, r.validity, time.Now(), cur.CABundle)
	if err != nil {
		return err
	}
	if r.patch != nil {
		if _, err := r.patch(ctx, next.CABundle); err != nil {
			if time.Until(cur.Leaf.NotAfter) > time.Minute {
				return err
			}
			r.log.Error("patch the webhook's caBundle; the old certificate expires: serving the new one anyway", "error", err)
		}
	}
	if err := next.Write(r.dir); err != nil {
		return err
	}
	r.log.Info("webhook certificate renewed", "dir", r.dir, "notAfter", next.Leaf.NotAfter, "renewAt", next.RenewAt())
	if r.renewed != nil {
		r.renewed(next)
	}
	return nil
}
