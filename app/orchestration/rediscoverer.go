package orchestration

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Rediscoverer rebuilds the state of a volume whose state was lost (its
// ReplicatedVolume deleted by hand, or with its CRD) from the copies in
// the nodes' pools (replica.Rediscover), and answers for this node the
// survey of every rebuilt state: what its pool holds of the volume
// (replica.Answer). A node whose object is deleted is given up
// (replica.Forget). A copy whose volume no longer exists for the
// cluster's users (no PersistentVolume) is not rebuilt: it is reported
// and kept, for an operator.
type Rediscoverer struct {
	node    replica.Node
	store   RediscoveryStore
	cluster ports.ClusterState
	specs   ports.SpecRecorder
	mounts  ports.MountTable
	nodes   ports.NodeDirectory
	volumes ports.VolumeDirectory
	events  ports.EventRecorder
	log     *zap.Logger

	mu sync.Mutex
	// surveys are the rebuilt states seen awaiting answers (Saw).
	surveys map[volume.ID]bool
	// reported: copies of deleted volumes already reported.
	reported map[volume.ID]bool
}

// RediscoveryStore is what rediscovery reads of the node's pool.
type RediscoveryStore interface {
	ListVolumes(ctx context.Context) ([]ports.VolumeInfo, error)
	GetVolume(ctx context.Context, id volume.ID) (ports.VolumeInfo, error)
	ListSnapshots(ctx context.Context, id volume.ID) ([]ports.SnapshotInfo, error)
}

// NewRediscoverer returns node's rediscoverer.
func NewRediscoverer(node replica.Node, store RediscoveryStore, cluster ports.ClusterState, specs ports.SpecRecorder, mounts ports.MountTable,
	nodes ports.NodeDirectory, volumes ports.VolumeDirectory, events ports.EventRecorder, log *zap.Logger) *Rediscoverer {
	return &Rediscoverer{node: node, store: store, cluster: cluster, specs: specs, mounts: mounts, nodes: nodes, volumes: volumes, events: events, log: log,
		surveys: map[volume.ID]bool{}, reported: map[volume.ID]bool{}}
}

// Saw is a listener of the states' feed: it remembers the rebuilt states
// awaiting answers, for the next Sync.
func (r *Rediscoverer) Saw(c ports.StateChange) {
	if c.Gone || len(c.State.Awaiting) == 0 {
		return
	}
	r.mu.Lock()
	r.surveys[c.Volume] = true
	r.mu.Unlock()
}

// Sync rebuilds the lost states of the local copies, then answers the
// surveys seen. Errors of one volume do not stop the others.
func (r *Rediscoverer) Sync(ctx context.Context) error {
	errs := []error{r.rebuild(ctx)}
	r.mu.Lock()
	ids := make([]volume.ID, 0, len(r.surveys))
	for id := range r.surveys {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		done, err := r.answer(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", id, err))
		}
		if done {
			r.mu.Lock()
			delete(r.surveys, id)
			r.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// rebuild makes the state of every local replicated copy whose state is
// gone.
func (r *Rediscoverer) rebuild(ctx context.Context) error {
	vols, err := r.store.ListVolumes(ctx)
	if err != nil {
		return fmt.Errorf("rediscover copies on %s: list local volumes: %w", r.node, err)
	}
	var errs []error
	for _, v := range vols {
		if err := r.rebuildOne(ctx, v); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", v.ID, err))
		}
	}
	return errors.Join(errs...)
}

func (r *Rediscoverer) rebuildOne(ctx context.Context, v ports.VolumeInfo) error {
	if recorded, has := v.Metadata[ports.MetaReplicationFactor]; has {
		if _, replicated := replica.RediscoveryFactor(recorded, true); !replicated {
			return nil // a plain volume: no state to rebuild
		}
	}
	_, err := r.cluster.Get(ctx, v.ID)
	if !errors.Is(err, ports.ErrNotFound) {
		return err // nil: the state is there
	}
	holds, ok, err := r.newest(ctx, v.ID)
	if err != nil || !ok {
		return err // no replication snapshot: never a replica's copy (or not yet)
	}
	if busy, err := r.written(ctx, v.ID); err != nil || busy {
		return err
	}
	user, exists, err := r.volumes.Volume(ctx, v.ID)
	if err != nil {
		return err
	}
	if !exists {
		if !r.reported[v.ID] {
			r.reported[v.ID] = true
			r.log.Warn("a copy of a volume that no longer exists is kept: delete the dataset if it is not wanted",
				zap.String("volume", string(v.ID)), zap.String("dataset", v.MountSource), zap.String("holds", replica.SnapshotName(holds)))
		}
		return nil
	}
	// The factor and the size are the volume's, as its users have them
	// (a secondary's copy records no factor, and a received copy no
	// size); the copy's own record when they do not say.
	recorded, has := user.ReplicationFactor, user.ReplicationFactor != ""
	if !has {
		recorded, has = v.Metadata[ports.MetaReplicationFactor]
	}
	rf, replicated := replica.RediscoveryFactor(recorded, has)
	if !replicated {
		return nil
	}
	nodes, err := r.nodes.FerryNodes(ctx)
	if err != nil {
		return err
	}
	st, err := replica.Rediscover(v.ID, rf, r.node, holds, nodes)
	if err != nil {
		return err
	}
	spec := ports.VolumeSpec{CapacityBytes: max(user.CapacityBytes, v.CapacityBytes), PersistentVolume: string(v.ID)}
	if ns, name, ok := strings.Cut(v.Metadata[ports.MetaPVC], "/"); ok {
		spec.ClaimNamespace, spec.ClaimName = ns, name
	}
	created, err := r.specs.CreateWithSpec(ctx, st, spec)
	if errors.Is(err, ports.ErrExists) {
		return nil // another node rebuilt it first: this one answers its survey
	}
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("the volume's state was lost: rebuilt from the copy on %s (%s), awaiting what %v hold", r.node, replica.SnapshotName(holds), created.Awaiting)
	r.log.Warn(msg, zap.String("volume", string(v.ID)), zap.String("dataset", v.MountSource))
	r.events.Record(ctx, v.ID, ports.Event{Type: ports.EventWarning, Reason: "Rediscovered", Message: msg})
	r.mu.Lock()
	r.surveys[v.ID] = true
	r.mu.Unlock()
	return nil
}

// answer answers id's survey for this node, and gives up the awaited
// nodes whose objects are deleted; done once the state awaits no one.
func (r *Rediscoverer) answer(ctx context.Context, id volume.ID) (bool, error) {
	st, err := r.cluster.Get(ctx, id)
	if errors.Is(err, ports.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if len(st.Awaiting) == 0 {
		return true, nil
	}
	var gone []replica.Node
	for _, n := range st.Awaiting {
		if n == r.node {
			continue
		}
		exists, err := r.nodes.NodeExists(ctx, n)
		if err != nil {
			return false, err
		}
		if !exists {
			gone = append(gone, n)
		}
	}
	if !slices.Contains(st.Awaiting, r.node) && len(gone) == 0 {
		return false, nil
	}
	if slices.Contains(st.Awaiting, r.node) {
		if busy, err := r.written(ctx, id); err != nil || busy {
			return false, err // the survey waits for this node
		}
	}
	holds, has, err := r.newest(ctx, id)
	if err != nil {
		return false, err
	}
	st, err = r.cluster.Update(ctx, id, func(s *replica.State) error {
		for _, n := range gone {
			replica.Forget(s, n)
		}
		if slices.Contains(s.Awaiting, r.node) {
			return replica.Answer(s, r.node, has, holds)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	for _, n := range gone {
		r.log.Warn("a node awaited by a rebuilt state is deleted: what its copy held is given up", zap.String("volume", string(id)), zap.String("node", string(n)))
	}
	what := "no copy"
	if has {
		what = replica.SnapshotName(holds)
	}
	r.log.Info("answered a rebuilt state's survey", zap.String("volume", string(id)), zap.String("holds", what), zap.Any("awaiting", st.Awaiting))
	return len(st.Awaiting) == 0, nil
}

// written reports whether a pod here still has this node's copy of id
// mounted (any mount but the dataset's own): its volume manager, and the
// watchdog with it, went with the lost state, and it may be the volume's
// one writer, ahead of every snapshot. Nothing is rebuilt or answered from
// a copy being written, so no other copy can be promoted meanwhile; once
// the pod stops the copy answers with its newest snapshot (what was
// written after it is kept aside, not discarded, when the volume moves
// on: 5.6).
func (r *Rediscoverer) written(ctx context.Context, id volume.ID) (bool, error) {
	info, err := r.store.GetVolume(ctx, id)
	if errors.Is(err, ports.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	points, err := r.mounts.MountsOf(info.MountSource)
	if err != nil {
		return false, fmt.Errorf("reading the mount table: %w", err)
	}
	for _, p := range points {
		if p != path.Clean(info.MountPath) {
			r.log.Warn("a pod still has the copy of a volume whose state is lost mounted: stop it; nothing is rebuilt or answered from this copy until then",
				zap.String("volume", string(id)), zap.String("mount", p))
			return true, nil
		}
	}
	return false, nil
}

// newest is the newest replication snapshot this node's copy of id holds
// (by epoch, then number); false when it holds none, or no copy.
func (r *Rediscoverer) newest(ctx context.Context, id volume.ID) (replica.Snap, bool, error) {
	list, err := r.store.ListSnapshots(ctx, id)
	if errors.Is(err, ports.ErrNotFound) {
		return replica.Snap{}, false, nil
	}
	if err != nil {
		return replica.Snap{}, false, err
	}
	var newest replica.Snap
	for _, s := range list {
		n, e, ok := replica.ParseSnapshotName(s.Name)
		if ok && (e > newest.Epoch || e == newest.Epoch && n > newest.Number) {
			newest = replica.Snap{Number: n, Epoch: e, GUID: s.GUID}
		}
	}
	return newest, newest.Number != 0, nil
}
