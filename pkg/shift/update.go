package shift

import (
	"context"
	"fmt"
	"maps"

	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
)

// istioObject is a typed Istio object danki updates (*VirtualService,
// *DestinationRule).
type istioObject[T any] interface {
	*T
	DeepCopy() *T
	GetAnnotations() map[string]string
}

// objectIO reads and writes one object: what updateWithRetry needs to know
// about it.
type objectIO[T any, O istioObject[T]] struct {
	ref  string // for errors and logs: "VirtualService shop/reviews"
	get  func(ctx context.Context) (O, error)
	put  func(ctx context.Context, obj O) (O, error)
	spec func(obj O) proto.Message
}

// updateWithRetry is danki's one read–mutate–update loop: it reads the
// object, lets mutate change a deep copy and writes it back, in one Update,
// when the spec or the annotations changed. A 409 Conflict starts over with
// a fresh read (s.Backoff paces the tries, client-go's
// retry.RetryOnConflict), so a stale object is never written and someone
// else's concurrent change is never lost. An error from mutate writes
// nothing. what names the change in errors ("set canary weight 10").
func updateWithRetry[T any, O istioObject[T]](ctx context.Context, s *Shifter, io objectIO[T, O], what string, mutate func(obj O) error) (O, error) {
	var (
		attempts int
		result   O
	)
	err := retry.RetryOnConflict(s.Backoff, func() error {
		attempts++
		cur, err := io.get(ctx)
		if err != nil {
			return err
		}
		next := O(cur.DeepCopy())
		if err := mutate(next); err != nil {
			return err
		}
		if proto.Equal(io.spec(cur), io.spec(next)) && maps.Equal(cur.GetAnnotations(), next.GetAnnotations()) {
			result = cur
			return nil
		}
		result, err = io.put(ctx, next)
		if apierrors.IsConflict(err) {
			s.log.Debug(io.ref+" changed under us; retrying with a fresh read", "attempt", attempts)
		}
		return err
	})
	if apierrors.IsConflict(err) {
		return nil, fmt.Errorf("%s on %s: gave up after %d conflicting writes (something else keeps changing it; nothing was written): %w", what, io.ref, attempts, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", what, io.ref, err)
	}
	return result, nil
}
