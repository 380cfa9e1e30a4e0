// Package rvstate is ports.ClusterState on the Kubernetes API: each
// volume's replica state is the status of its ReplicatedVolume
// (adapters/kube/rvapi), read with a GET and changed only by a PUT to the
// status subresource carrying the resourceVersion read, so that the API
// server's optimistic concurrency is the compare-and-swap. Everything
// Update may change is in that one object and written in one request.
// The same Store watches one volume's state (ports.StateWatcher), feeds
// every volume's (ports.StateFeed, feed.go) and records a new volume's
// spec (ports.SpecRecorder).
package rvstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/ferry-csi/ferry/adapters/casloop"
	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Store is a ClusterState on ReplicatedVolume objects.
type Store struct {
	client dynamic.Interface
	rvs    dynamic.ResourceInterface
	// labels are put on every object Create makes (tests mark theirs).
	labels map[string]string
	// skipped (nil: nobody) hears of an object the feed leaves out: one
	// that cannot be read as a state (edited by hand, or of a newer
	// format than this build reads).
	skipped func(name string, err error)
}

// OnSkipped makes the feed tell f about each object it leaves out.
func (s *Store) OnSkipped(f func(name string, err error)) { s.skipped = f }

var (
	_ ports.ClusterState     = (*Store)(nil)
	_ ports.StateWatcher     = (*Store)(nil)
	_ ports.SpecRecorder     = (*Store)(nil)
	_ ports.StateFeed        = (*Store)(nil)
	_ ports.CapacityRecorder = (*Store)(nil)
)

// New returns a store using client. labels, if any, are added to every
// object Create makes.
func New(client dynamic.Interface, labels map[string]string) *Store {
	return &Store{client: client, rvs: client.Resource(rvapi.GVR), labels: labels}
}

// Watch notifies on every change of id's ReplicatedVolume
// (ports.StateWatcher): an informer on that one object (a field selector
// on its name), so the API server sends this process only its own
// volume's events. The informer lists again after a broken watch and
// notifies then; its cache is never read: Get reads the server.
func (s *Store) Watch(ctx context.Context, id volume.ID) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := rvapi.ObjectName(id)
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(s.client, 0, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
	inf := f.ForResource(rvapi.GVR).Informer()
	ch := make(chan struct{}, 1)
	var mu sync.Mutex
	closed := false
	notify := func() {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		select {
		case ch <- struct{}{}:
		default: // one pending notification is enough
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return nil, fmt.Errorf("watch cluster state of volume %s: %w", id, err)
	}
	f.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		f.Shutdown()
		mu.Lock()
		closed = true
		close(ch)
		mu.Unlock()
	}()
	return ch, nil
}

func (s *Store) Get(ctx context.Context, id volume.ID) (replica.State, error) {
	st, _, err := s.get(ctx, id)
	return st, err
}

// get also says whether the object is being deleted.
func (s *Store) get(ctx context.Context, id volume.ID) (replica.State, bool, error) {
	u, err := s.rvs.Get(ctx, rvapi.ObjectName(id), metav1.GetOptions{})
	if err != nil {
		return replica.State{}, false, apiError("read cluster state of volume "+string(id), err)
	}
	rv, err := decode(u)
	if err != nil {
		return replica.State{}, false, err
	}
	if rv.Spec.VolumeID != string(id) {
		// Only a hashed name can collide, and only with a crafted ID.
		return replica.State{}, false, fmt.Errorf("read cluster state of volume %s: object %s belongs to volume %q: %w", id, rv.Name, rv.Spec.VolumeID, ports.ErrNotFound)
	}
	st, err := rvapi.ToState(rv)
	if errors.Is(err, ports.ErrIncompatible) {
		return replica.State{}, false, fmt.Errorf("read cluster state of volume %s: %w", id, err)
	}
	if err != nil {
		return replica.State{}, false, fmt.Errorf("read cluster state of volume %s: %v: %w", id, err, ports.ErrInvalid)
	}
	return st, rv.DeletionTimestamp != nil, nil
}

var _ ports.SpecReader = (*Store)(nil)

// Spec implements ports.SpecReader: what the ReplicatedVolume's spec
// records of the volume.
func (s *Store) Spec(ctx context.Context, id volume.ID) (ports.VolumeSpec, error) {
	u, err := s.rvs.Get(ctx, rvapi.ObjectName(id), metav1.GetOptions{})
	if err != nil {
		return ports.VolumeSpec{}, apiError("read the spec of volume "+string(id), err)
	}
	rv, err := decode(u)
	if err != nil {
		return ports.VolumeSpec{}, err
	}
	if rv.Spec.VolumeID != string(id) {
		return ports.VolumeSpec{}, fmt.Errorf("read the spec of volume %s: object %s belongs to volume %q: %w", id, rv.Name, rv.Spec.VolumeID, ports.ErrNotFound)
	}
	sp := rv.Spec
	return ports.VolumeSpec{CapacityBytes: sp.CapacityBytes, SnapshotInterval: rvapi.SnapshotInterval(sp), Properties: sp.Properties,
		PersistentVolume: sp.PersistentVolumeName, StorageClass: sp.StorageClassName, ClaimNamespace: sp.ClaimNamespace, ClaimName: sp.ClaimName}, nil
}

// Create is CreateWithSpec with nothing known about the volume but its
// state.
func (s *Store) Create(ctx context.Context, st replica.State) (replica.State, error) {
	return s.CreateWithSpec(ctx, st, ports.VolumeSpec{})
}

// CreateWithSpec makes the object (spec, with what spec tells of the
// volume) and then writes its status: the API server ignores a status sent
// with a create when the status subresource is on. If the second write
// fails, the object exists with an empty status (epoch 0, no replicas),
// which is a valid state that Update can complete; Create is not retried
// over it (ErrExists).
func (s *Store) CreateWithSpec(ctx context.Context, st replica.State, spec ports.VolumeSpec) (replica.State, error) {
	if err := st.Validate(); err != nil {
		return replica.State{}, fmt.Errorf("create cluster state of volume %s: %v: %w", st.Volume, err, ports.ErrInvalid)
	}
	if _, err := volume.ParseID("volume", string(st.Volume)); err != nil {
		return replica.State{}, fmt.Errorf("create cluster state: %v: %w", err, ports.ErrInvalid)
	}
	st.Version, st.Deleting = "", false
	rv := rvapi.FromState(st)
	rv.Spec.Describe(spec)
	rv.Labels = map[string]string{rvapi.LabelVolume: rvapi.Hash(st.Volume)}
	rv.Finalizers = []string{rvapi.Finalizer}
	for k, v := range s.labels {
		rv.Labels[k] = v
	}
	u, err := encode(rv)
	if err != nil {
		return replica.State{}, err
	}
	created, err := s.rvs.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return replica.State{}, apiError("create cluster state of volume "+string(st.Volume), err)
	}
	st.Version = created.GetResourceVersion()
	written, ok, err := s.swap(ctx, st.Version, st)
	if err != nil {
		return replica.State{}, err
	}
	if !ok {
		return replica.State{}, fmt.Errorf("create cluster state of volume %s: written over before its status was set: %w", st.Volume, ports.ErrConflict)
	}
	return written, nil
}

// Update is casloop's loop over GET and a status PUT; see
// ports.ClusterState.
func (s *Store) Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error) {
	return casloop.Update(ctx, id, s.Get, func(expected string, next replica.State) (replica.State, bool, error) {
		return s.swap(ctx, expected, next)
	}, fn)
}

// swap writes next's status if the object is still at resourceVersion
// expected. The spec sent along is ignored by the status subresource; the
// written object's spec (replicationFactor included) comes back.
func (s *Store) swap(ctx context.Context, expected string, next replica.State) (replica.State, bool, error) {
	if err := next.Validate(); err != nil {
		return replica.State{}, false, fmt.Errorf("update cluster state of volume %s: %v: %w", next.Volume, err, ports.ErrInvalid)
	}
	next.Version = expected
	if casloop.Removes(next) {
		return s.release(ctx, next, expected)
	}
	rv := rvapi.FromState(next)
	u, err := encode(rv)
	if err != nil {
		return replica.State{}, false, err
	}
	written, err := s.rvs.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if lost, err := swapLost(err, "update cluster state of volume "+string(next.Volume)); lost || err != nil {
		return replica.State{}, false, err
	}
	out, err := decode(written)
	if err != nil {
		return replica.State{}, false, err
	}
	st, err := rvapi.ToState(out)
	if errors.Is(err, ports.ErrIncompatible) {
		return replica.State{}, false, fmt.Errorf("update cluster state of volume %s: %w", next.Volume, err)
	}
	if err != nil {
		return replica.State{}, false, fmt.Errorf("update cluster state of volume %s: the server returned %v: %w", next.Volume, err, ports.ErrInvalid)
	}
	if out.Spec.ReplicationFactor != next.ReplicationFactor {
		// Unreachable: the spec was read at the same resourceVersion.
		return replica.State{}, false, fmt.Errorf("update cluster state of volume %s: replicationFactor is %d on the server, %d when decided: %w", next.Volume, out.Spec.ReplicationFactor, next.ReplicationFactor, ports.ErrConflict)
	}
	return st, true, nil
}

// Delete marks the object with Ferry's intent (rvapi.DeleteIntent) and
// asks the API server to delete it: the finalizer keeps it, with a
// deletionTimestamp (State.Deleting), until its last replica left; a
// state listing no replica is released at once. An object made before the
// finalizer existed goes at once.
func (s *Store) Delete(ctx context.Context, id volume.ID) error {
	if _, _, err := s.get(ctx, id); err != nil {
		return err
	}
	intent, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{rvapi.DeleteIntent: "true"}}})
	if err != nil {
		return err
	}
	_, err = s.rvs.Patch(ctx, rvapi.ObjectName(id), types.MergePatchType, intent, metav1.PatchOptions{})
	if err := apiError("mark cluster state of volume "+string(id)+" for deletion", err); err != nil {
		return err
	}
	err = s.rvs.Delete(ctx, rvapi.ObjectName(id), metav1.DeleteOptions{})
	if err := apiError("delete cluster state of volume "+string(id), err); err != nil {
		return err
	}
	for range casloop.MaxAttempts {
		st, _, err := s.get(ctx, id)
		switch {
		case errors.Is(err, ports.ErrNotFound):
			return nil
		case err != nil:
			return err
		case len(st.Replicas) > 0:
			return nil // the last replica to leave releases it
		}
		if _, ok, err := s.release(ctx, st, st.Version); err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("delete cluster state of volume %s: gave up after %d attempts: %w", id, casloop.MaxAttempts, ports.ErrConflict)
}

// RecordCapacity grows the ReplicatedVolume's spec.capacityBytes
// (ports.CapacityRecorder): a merge patch carrying the resourceVersion it
// was read at, retried on a conflict; a size already as large is left.
func (s *Store) RecordCapacity(ctx context.Context, id volume.ID, capacityBytes int64) error {
	name := rvapi.ObjectName(id)
	for range casloop.MaxAttempts {
		u, err := s.rvs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return apiError("read the size of volume "+string(id), err)
		}
		rv, err := decode(u)
		if err != nil {
			return err
		}
		if rv.Spec.VolumeID != string(id) {
			return fmt.Errorf("record the size of volume %s: object %s belongs to volume %q: %w", id, name, rv.Spec.VolumeID, ports.ErrNotFound)
		}
		if rv.Spec.CapacityBytes >= capacityBytes {
			return nil
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
			"spec":     map[string]any{"capacityBytes": capacityBytes},
		})
		if err != nil {
			return err
		}
		_, err = s.rvs.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		return apiError("record the size of volume "+string(id), err)
	}
	return fmt.Errorf("record the size of volume %s: gave up after %d attempts: %w", id, casloop.MaxAttempts, ports.ErrConflict)
}

// release removes Ferry's finalizer from the object of a volume being
// deleted whose last replica left, if it is still at resourceVersion
// expected: the API server then removes the object. The patch carries the
// resourceVersion, so it is a compare-and-swap like the status writes.
func (s *Store) release(ctx context.Context, next replica.State, expected string) (replica.State, bool, error) {
	name := rvapi.ObjectName(next.Volume)
	u, err := s.rvs.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return replica.State{}, false, nil // the loop's next read says ErrNotFound
	case err != nil:
		return replica.State{}, false, apiError("release cluster state of volume "+string(next.Volume), err)
	case u.GetResourceVersion() != expected:
		return replica.State{}, false, nil
	}
	var keep []string
	for _, f := range u.GetFinalizers() {
		if f != rvapi.Finalizer {
			keep = append(keep, f)
		}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": expected, "finalizers": keep}})
	if err != nil {
		return replica.State{}, false, err
	}
	_, err = s.rvs.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if lost, err := swapLost(err, "release cluster state of volume "+string(next.Volume)); lost || err != nil {
		return replica.State{}, false, err
	}
	next.Version = ""
	return next, true, nil
}

// swapLost reads the answer to a write guarded by a resourceVersion: a
// conflict, or the object deleted in between, is a lost swap (the loop
// re-reads, and then says ErrNotFound if it is gone); any other error is
// the port's.
func swapLost(err error, what string) (bool, error) {
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, apiError(what, err)
	}
	return false, nil
}

func encode(rv rvapi.ReplicatedVolume) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(rv)
	if err != nil {
		return nil, fmt.Errorf("encode ReplicatedVolume %s: %w", rv.Name, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("encode ReplicatedVolume %s: %w", rv.Name, err)
	}
	return u, nil
}

func decode(u *unstructured.Unstructured) (rvapi.ReplicatedVolume, error) {
	var rv rvapi.ReplicatedVolume
	b, err := u.MarshalJSON()
	if err == nil {
		err = json.Unmarshal(b, &rv)
	}
	if err != nil {
		return rv, fmt.Errorf("decode ReplicatedVolume %s: %v: %w", u.GetName(), err, ports.ErrInvalid)
	}
	return rv, nil
}

// apiError maps the API server's answers onto the port's errors.
func apiError(what string, err error) error {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %v: %w", what, err, ports.ErrNotFound)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%s: %v: %w", what, err, ports.ErrExists)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%s: %v: %w", what, err, ports.ErrConflict)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%s: %v: %w", what, err, ports.ErrInvalid)
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err):
		return fmt.Errorf("%s: %v: %w", what, err, ports.ErrUnavailable)
	case errors.As(err, &status):
		return fmt.Errorf("%s: %w", what, err)
	default:
		// Transport errors (connection refused, reset): the server may
		// answer later. A cancelled caller gets its own error back.
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return fmt.Errorf("%s: %v: %w", what, err, ports.ErrUnavailable)
	}
}
