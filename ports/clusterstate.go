package ports

import (
	"context"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// ClusterState keeps each volume's shared replica state where every node
// sees it (a custom resource in Kubernetes; in memory for tests). PV
// spec.csi is immutable, so it cannot live there.
type ClusterState interface {
	// Get returns the volume's state; ErrNotFound if there is none.
	Get(ctx context.Context, id volume.ID) (replica.State, error)
	// Create stores the first state of a volume; ErrExists if one exists.
	Create(ctx context.Context, s replica.State) (replica.State, error)
	// Update reads the newest state, applies fn and writes the result only
	// if no one wrote in between (compare-and-swap on State.Version); on a
	// conflict it re-reads and runs fn again, up to a bounded number of
	// times, then returns ErrConflict. fn must be a pure function of its
	// argument: it may run several times. An error from fn aborts without
	// writing and is returned as is. fn is not called when the state does
	// not exist (ErrNotFound). A result that fails State.Validate, or that
	// changes State.Volume, State.ReplicationFactor or State.Deleting, is
	// refused with ErrInvalid: the replication factor is the volume's spec, which its
	// owner edits (Kubernetes: spec.replicationFactor of the
	// ReplicatedVolume), while Update writes the replicas' status. The written state
	// is returned; callers must not rely on its Version changing when fn
	// changed nothing (Kubernetes skips such writes).
	Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error)
	// Delete starts the volume's deletion: a state listing no replica is
	// removed at once; otherwise it is marked Deleting (Kubernetes: a
	// deletionTimestamp held by Ferry's finalizer), each replica destroys
	// its copy and leaves, and the Update that removes the last entry
	// removes the state instead of writing it (Get then answers
	// ErrNotFound), so no copy outlives the volume unseen. Deleting an
	// already deleting state changes nothing. ErrNotFound if absent.
	Delete(ctx context.Context, id volume.ID) error
}

// StateWatcher is implemented by the ClusterStates that can tell a reader
// that a volume's state changed, so that an idle volume manager reads
// nothing until something happens (a store without it is polled every
// tick).
//
// Freshness: a notification only says "read again"; the state itself is
// always read with Get, which returns the newest committed state, so a
// decision never rests on a cached view, and never on one older than the
// reader's own last write. Every change committed after Watch returned is
// followed by a notification within the watch's latency (Kubernetes: the
// watch of the one object, typically milliseconds); while the watch is
// broken, changes are notified once it is re-established (the informer
// lists again). Notifications are coalesced (the channel holds one) and
// may be spurious, the reader's own writes included. The channel is
// closed when ctx ends. A reader still re-reads now and then (a resync)
// to bound what a lost notification could cost.
type StateWatcher interface {
	Watch(ctx context.Context, id volume.ID) (<-chan struct{}, error)
}

// StateChange is what a StateFeed sends of one volume: its newest state,
// or, Gone, that its state no longer exists (State is then zero).
type StateChange struct {
	Volume volume.ID
	State  replica.State
	Gone   bool
}

// StateFeed is implemented by the ClusterStates that can send the state of
// every volume as it changes (Kubernetes: an informer on all
// ReplicatedVolumes), so that a reader keeps a view of all of them
// without reading each (the daemon's: its fence and placement labels).
//
// Completeness: no change is dropped. While the reader lags, a volume's
// changes coalesce into its newest (the reader may miss intermediate
// states, never the last one), so the feed holds at most one pending
// change per volume and a reader that has drained it holds the newest
// state the feed knows of every volume, deletions included (Gone, also
// for a deletion learnt only when the feed lists again).
//
// Freshness: a change reaches a reader that keeps reading within the
// watch's latency (Kubernetes: typically milliseconds); while the watch is
// broken, once it is re-established (the feed lists again). A state that
// cannot be decoded is skipped: the reader keeps the last one it got. The
// view built from it is still a hint for what the node does on its own
// (fence, label): every shared decision reads afresh with Get and writes
// by compare-and-swap. The channel is closed when ctx ends, after
// everything the feed started has stopped.
type StateFeed interface {
	Feed(ctx context.Context) (<-chan StateChange, error)
}

// VolumeSpec is what a volume is: its size, how often it is snapshotted
// and what it was made for. Stores that can keep it next to the volume's
// state (Kubernetes: the ReplicatedVolume's spec) record it when the state
// is created, for operators. Of its fields the size, the snapshot interval
// and the properties are read back, into replica.State (every copy takes
// the size and the properties; the primary's machine obeys the interval),
// and the claim, where events also go. Empty fields are unknown (a volume
// made outside Kubernetes has no claim).
type VolumeSpec struct {
	CapacityBytes    int64
	SnapshotInterval time.Duration
	// Properties are the native properties every copy holds
	// (volume.Params.Properties).
	Properties map[string]string
	// PersistentVolume and StorageClass name the Kubernetes objects the
	// volume was provisioned for.
	PersistentVolume string
	StorageClass     string
	// ClaimNamespace and ClaimName name the PersistentVolumeClaim, when
	// the provisioner tells (external-provisioner --extra-create-metadata).
	ClaimNamespace, ClaimName string
}

// SpecReader reads what a volume's shared state records of it beside the
// replicas (its VolumeSpec): what an operator's tools label it with.
type SpecReader interface {
	// Spec is the volume's spec; ErrNotFound without a state.
	Spec(ctx context.Context, id volume.ID) (VolumeSpec, error)
}

// SpecRecorder is implemented by the ClusterStates that record a
// VolumeSpec with a volume's first state.
type SpecRecorder interface {
	// CreateWithSpec is ClusterState.Create that also records spec. The
	// spec is written once, with the state: ErrExists leaves the existing
	// one as it is.
	CreateWithSpec(ctx context.Context, s replica.State, spec VolumeSpec) (replica.State, error)
}

// CapacityRecorder records a replicated volume's new size (an expansion)
// where every copy reads it (replica.State.CapacityBytes; Kubernetes: the
// ReplicatedVolume's spec.capacityBytes): each copy then grows to it. A
// size never shrinks: a smaller or equal one changes nothing. ErrNotFound
// when the volume has no state (it is not replicated).
type CapacityRecorder interface {
	RecordCapacity(ctx context.Context, id volume.ID, capacityBytes int64) error
}
