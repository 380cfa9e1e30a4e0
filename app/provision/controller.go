package provision

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/app/volumelock"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Config is what the controller's use cases know about the process they
// run in.
type Config struct {
	Node replica.Node // the node whose store this process drives
	Pool string       // the pool the store serves
	// Locks is the process's table of per-volume locks, shared with the
	// node's use cases when one process serves both (a delete and a
	// publish of one volume never interleave); nil: a table of its own.
	Locks *volumelock.Locks
}

// Volume context keys: facts fixed at creation, handed to every node call.
const (
	ContextReplicationFactor = "replicationFactor"
	ContextPool              = "pool"
)

// Service implements the CSI controller's use cases on the local store.
//
// In this stage a volume lives in the pool of the node the controller runs
// on, and CreateVolume reports that node as its topology; the orchestration
// stage moves placement to per-volume replica pods.
type Service struct {
	cfg    Config
	store  Store
	mounts ports.MountTable
	locks  *volumelock.Locks
	log    *zap.Logger
	// repl, when set, replicates volumes whose replication factor is 2 or
	// more (WithReplication).
	repl Replication
	// peers, when set, hold the CSI snapshots this node's pool lacks
	// (WithPeers).
	peers Peers
	// pool is what the store's pool can do beyond plain volumes
	// (WithPoolFeatures; none without it).
	pool ports.PoolFeatures
}

// New returns the controller use cases over store. mounts is the
// mount table of the node the store is on: in this stage it tells whether
// a volume is published (DeleteVolume refuses a volume in use).
func New(cfg Config, store Store, mounts ports.MountTable, log *zap.Logger, opts ...Option) *Service {
	locks := cfg.Locks
	if locks == nil {
		locks = volumelock.New()
	}
	c := &Service{cfg: cfg, store: store, mounts: mounts, locks: locks, log: log, pool: ports.NoPoolFeatures{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Option adds an optional capability to the controller use cases.
type Option func(*Service)

// Replication is what the controller replicates volumes with.
type Replication struct {
	// Cluster holds the volumes' shared states (Kubernetes: their
	// ReplicatedVolumes).
	Cluster ports.ClusterState
	// Specs, when set, records what each volume is with its first state
	// (Kubernetes: the ReplicatedVolume's spec, the same store as
	// Cluster); nil: the state alone.
	Specs ports.SpecRecorder
	// Workload runs the secondaries (Kubernetes: the replica pods).
	Workload ports.ReplicaWorkload
	// Events, when set, hears what the replication of a volume did: each
	// step of setting it up that fails, and its completion (Kubernetes:
	// on the ReplicatedVolume and its claim).
	Events ports.EventRecorder
	// Sizes records an expansion of a replicated volume where every copy
	// reads it (each grows to it); nil: the expansion stays this copy's.
	Sizes ports.CapacityRecorder
}

// WithReplication makes CreateVolume replicate volumes whose replication
// factor is 2 or more with r: their shared state names this node the
// primary of epoch 1, this node's volume manager starts, and the workload
// runs the secondaries. Volumes of factor 1 stay plain node-local
// datasets.
func WithReplication(r Replication) Option { return func(c *Service) { c.repl = r } }

// Peers is where a restore finds a CSI snapshot this node's pool lacks:
// the volume was snapshotted on another node (its primary of the time),
// and the scheduler put the restored claim's pod here.
type Peers struct {
	// Transport lists and fetches the other nodes' CSI snapshots.
	Transport ports.SnapshotPeers
	// Nodes are the nodes to ask (Kubernetes: every node with a Ferry
	// lease), after the source volume's copies (Replication.Cluster).
	Nodes ports.NodeLeases
}

// WithPeers makes a restore fetch its snapshot from the node that holds
// it when this node's pool does not (over the peer stream, whole); without
// it such a restore answers NotFound.
func WithPeers(p Peers) Option { return func(c *Service) { c.peers = p } }

// WithPoolFeatures says what the store's pool can do beyond plain volumes:
// encrypted volumes (a class asking for encryption gets no capacity on a
// pool without it) and the stream features a restore from a peer asks
// for. Without it: nothing beyond plain volumes and streams.
func WithPoolFeatures(f ports.PoolFeatures) Option { return func(c *Service) { c.pool = f } }

// CreateVolumeRequest is a CreateVolume call as the CSI adapter received
// it, checked once by volume.ParseCreate.
type CreateVolumeRequest = volume.CreateRequest

// Volume is a provisioned volume as the CSI controller reports it.
type Volume struct {
	ID               volume.ID
	CapacityBytes    int64
	Context          map[string]string
	Node             replica.Node
	SourceSnapshotID string
	SourceVolumeID   string
	// Usable, for a replicated volume, is a second topology segment: the
	// nodes where a ready replica lives (placement labels).
	Usable map[string]string
}

// CreateVolume provisions a volume, or returns the one a previous identical
// request made. A request that differs from the first (size, parameters,
// source) answers ErrIncompatible; nothing is changed by a refused request.
func (c *Service) CreateVolume(ctx context.Context, req CreateVolumeRequest) (Volume, error) {
	spec, err := volume.ParseCreate(req, c.cfg.Pool)
	if err != nil {
		return Volume{}, err
	}
	id, params, source := spec.ID, spec.Params, spec.Source.String()
	meta := map[string]string{
		ports.MetaVolume:            string(id),
		ports.MetaName:              spec.Name,
		ports.MetaReplicationFactor: strconv.Itoa(params.ReplicationFactor),
		ports.MetaParams:            spec.ParamsDigest,
	}
	if source != "" {
		meta[ports.MetaSource] = source
	}
	if ns, name := spec.Claim(); name != "" {
		meta[ports.MetaPVC] = ns + "/" + name
	}

	unlock, ok := c.locks.TryLock("volume/" + string(id))
	if !ok {
		return Volume{}, fmt.Errorf("create volume %s: %w", id, refusal.ErrPending)
	}
	defer unlock()

	log := c.log.With(zap.String("volume", string(id)))
	existing, err := c.store.GetVolume(ctx, id)
	switch {
	case err == nil && existing.Metadata[ports.MetaName] == "":
		// A copy that failed between receiving and recording its metadata:
		// the stream alone made it, so it holds nothing but the source's data.
		log.Warn("destroying an incomplete copy left by an earlier attempt")
		if err := c.store.DestroyVolume(ctx, id); err != nil {
			return Volume{}, err
		}
	case err == nil:
		if !spec.Capacity.Fits(existing.CapacityBytes) || existing.Metadata[ports.MetaParams] != meta[ports.MetaParams] ||
			existing.Metadata[ports.MetaSource] != meta[ports.MetaSource] {
			return Volume{}, fmt.Errorf("volume %s (%d bytes, source %q): %w", id, existing.CapacityBytes, existing.Metadata[ports.MetaSource], refusal.ErrIncompatible)
		}
		v, err := c.replicate(ctx, c.volume(existing, spec.Source), spec)
		c.closeEncrypted(ctx, id, params, log)
		return v, err
	case errors.Is(err, ports.ErrNotOwned):
		return Volume{}, fmt.Errorf("volume %s: a dataset of that name exists that Ferry did not create: %w", id, refusal.ErrPrecondition)
	case !errors.Is(err, ports.ErrNotFound):
		return Volume{}, err
	}

	var info ports.VolumeInfo
	nv := newVolume{id, spec.Size, spec.DefaultSize, params.Properties, meta}
	switch spec.Source.Kind {
	case volume.FromSnapshot:
		info, err = c.copyFromSnapshot(ctx, nv, spec.Source.ID)
	case volume.FromVolume:
		info, err = c.copyFromVolume(ctx, nv, spec.Source.ID)
	default:
		info, err = c.store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: spec.Size, Properties: params.Properties, Metadata: meta,
			Encryption: params.Encryption, Key: spec.Key})
	}
	if err != nil {
		return Volume{}, err
	}
	log.Info("volume created", zap.Int64("bytes", info.CapacityBytes), zap.String("source", source),
		zap.Int("replicationFactor", params.ReplicationFactor), zap.String("encryption", params.Encryption.Record()))
	v, err := c.replicate(ctx, c.volume(info, spec.Source), spec)
	c.closeEncrypted(ctx, id, params, log)
	return v, err
}

// closeEncrypted unmounts an encrypted volume and unloads its key at the
// end of its creation on this node: `zfs create` loaded the key and
// mounted the filesystem, and nothing here needs them (raw sends need no
// key); the publish that needs the volume loads the key from its Secret
// and mounts it again. Best effort, logged: a failure leaves the key
// loaded here until a later unpublish or a reboot. A plaintext volume is
// not touched (no command more than before encryption).
func (c *Service) closeEncrypted(ctx context.Context, id volume.ID, params volume.Params, log *zap.Logger) {
	if !params.Encryption.On() {
		return
	}
	if err := c.store.UnloadKey(context.WithoutCancel(ctx), id); err != nil {
		log.Warn("encrypted volume created, but its key was not unloaded: it stays loaded on this node", zap.Error(err))
		return
	}
	log.Info("encrypted volume closed after its creation: unmounted, key unloaded")
}

// replicate sets up replication of a new (or retried) volume of factor 2
// or more when replication is enabled: the shared state with this node as
// the active primary of epoch 1 (the volume was created here for the pod
// the scheduler placed here; a publish elsewhere hands the primary over,
// app/publish), this node's volume manager, and the secondaries'
// workload sized by placement.Desired. Every step is idempotent, so a
// retried CreateVolume completes what an interrupted one began.
func (c *Service) replicate(ctx context.Context, v Volume, spec volume.CreateSpec) (Volume, error) {
	params := spec.Params
	if c.repl.Cluster == nil || c.repl.Workload == nil || params.ReplicationFactor < 2 {
		return v, nil
	}
	self := c.cfg.Node
	first := replica.State{Volume: v.ID, ReplicationFactor: params.ReplicationFactor, Epoch: 1, Primary: self, CapacityBytes: v.CapacityBytes,
		Properties: params.Properties,
		Replicas:   []replica.Replica{{Node: self, Active: true}}}
	var st replica.State
	var err error
	if c.repl.Specs != nil {
		st, err = c.repl.Specs.CreateWithSpec(ctx, first, volumeSpec(v, spec))
	} else {
		st, err = c.repl.Cluster.Create(ctx, first)
	}
	if errors.Is(err, ports.ErrExists) {
		st, err = c.repl.Cluster.Get(ctx, v.ID)
	}
	if err != nil {
		c.warn(ctx, v.ID, ReasonStateFailed, "replicated volume: shared state not created: %v", err)
		return Volume{}, fmt.Errorf("replicated volume %s: shared state: %w", v.ID, err)
	}
	primary := st.Primary == self
	if r, ok := st.Replica(self); !ok || (primary && !r.Active) {
		primary = false
	}
	if err := c.repl.Workload.StartReplica(ctx, v.ID, self, params.SnapshotInterval, primary); err != nil {
		c.warn(ctx, v.ID, ReasonReplicaFailed, "replicated volume: volume manager on node %s not started: %v", self, err)
		return Volume{}, err
	}
	if err := c.repl.Workload.Apply(ctx, v.ID, placement.Desired(st), params.SnapshotInterval); err != nil {
		c.warn(ctx, v.ID, ReasonWorkloadFailed, "replicated volume: ReplicaSet and budget not applied: %v", err)
		return Volume{}, err
	}
	k, val := c.repl.Workload.Segment(v.ID)
	v.Usable = map[string]string{k: val}
	holder := fmt.Sprintf("this node %s holds the primary", self)
	if !primary {
		holder = fmt.Sprintf("this node %s holds a copy, node %s the primary", self, st.Primary)
	}
	c.record(ctx, v.ID, ports.Event{Type: ports.EventNormal, Reason: ReasonReplicasRequested,
		Message: fmt.Sprintf("replicated volume: %d copies; %s; ReplicaSet and budget applied", st.ReplicationFactor, holder)})
	return v, nil
}

// Reasons of the controller's events.
const (
	// ReasonReplicasRequested: a replicated volume's state, this node's
	// volume manager, ReplicaSet and budget are in place.
	ReasonReplicasRequested = "ReplicasRequested"
	// Warnings, one per failed step of setting up replication (CreateVolume
	// fails and the provisioner retries).
	ReasonStateFailed    = "ReplicatedVolumeFailed"
	ReasonReplicaFailed  = "VolumeManagerFailed"
	ReasonWorkloadFailed = "ReplicaSetFailed"
)

func (c *Service) record(ctx context.Context, id volume.ID, e ports.Event) {
	if c.repl.Events != nil {
		c.repl.Events.Record(ctx, id, e)
	}
}

func (c *Service) warn(ctx context.Context, id volume.ID, reason, format string, args ...any) {
	c.record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// volumeSpec is what the shared state records of a new volume for
// operators: its size and snapshot interval, and, from the provisioner's
// metadata (--extra-create-metadata), its PersistentVolume and claim. The
// provisioner names the volume after its PersistentVolume, so the name is
// the PV's when the metadata does not say. The StorageClass's name is not
// in a CreateVolume request.
func volumeSpec(v Volume, spec volume.CreateSpec) ports.VolumeSpec {
	ns, name := spec.Claim()
	return ports.VolumeSpec{
		CapacityBytes:    v.CapacityBytes,
		SnapshotInterval: spec.Params.SnapshotInterval,
		Properties:       spec.Params.Properties,
		PersistentVolume: spec.PersistentVolume(),
		ClaimNamespace:   ns,
		ClaimName:        name,
	}
}

func (c *Service) volume(info ports.VolumeInfo, src volume.Source) Volume {
	v := Volume{
		ID:            info.ID,
		CapacityBytes: info.CapacityBytes,
		Context: map[string]string{
			ContextReplicationFactor: info.Metadata[ports.MetaReplicationFactor],
			ContextPool:              c.cfg.Pool,
		},
		Node: c.cfg.Node,
	}
	switch src.Kind {
	case volume.FromSnapshot:
		v.SourceSnapshotID = src.ID
	case volume.FromVolume:
		v.SourceVolumeID = src.ID
	}
	return v
}

// DeleteVolume destroys a volume. A volume that does not exist (or an ID
// no volume can have) is already deleted. A volume with CSI snapshots is
// kept (ErrPrecondition): destroying it would destroy them. A volume in
// use is kept too (ErrPrecondition, volume.MayDelete): "in use" is a
// mount of its filesystem on this node other than its own mountpoint (the
// replica state's active primary is not asked: a replicated volume's state
// is marked deleted, and on Kubernetes a claim in use is not deleted).
func (c *Service) DeleteVolume(ctx context.Context, volumeID string) error {
	if volumeID == "" {
		return &volume.InvalidError{Field: "volume_id", Reason: "must not be empty"}
	}
	id, err := volume.ParseID("volume_id", volumeID)
	if err != nil {
		return nil // no volume can have this ID
	}
	unlock, ok := c.locks.TryLock("volume/" + string(id))
	if !ok {
		return fmt.Errorf("delete volume %s: %w", id, refusal.ErrPending)
	}
	defer unlock()
	snaps, err := c.store.ListSnapshots(ctx, id)
	local := true
	switch {
	case errors.Is(err, ports.ErrNotFound):
		local = false // a replicated volume may still have copies elsewhere
	case errors.Is(err, ports.ErrNotOwned):
		return fmt.Errorf("volume %s: %w: %w", id, refusal.ErrPrecondition, err)
	case err != nil:
		return err
	}
	if local {
		for _, s := range snaps {
			if ref, ok := volume.SnapshotRefFromStore(id, s.Name, s.Metadata[ports.MetaSnapshotName]); ok {
				return fmt.Errorf("volume %s has snapshot %s; delete its snapshots first: %w", id, ref.ID(), refusal.ErrPrecondition)
			}
		}
		switch err := c.checkNotInUse(ctx, id); {
		case errors.Is(err, ports.ErrNotFound):
			local = false
		case err != nil:
			return err
		}
	}
	if c.repl.Cluster != nil {
		// A replicated volume, wherever its copies are: its shared state
		// is marked for deletion; each replica (this node's included)
		// destroys its copy and leaves the list, and the state goes with
		// the last entry (Kubernetes: a finalizer holds the
		// ReplicatedVolume, and with it its pods, until then).
		switch err := c.repl.Cluster.Delete(ctx, id); {
		case err == nil:
			if _, err := c.repl.Cluster.Get(ctx, id); !errors.Is(err, ports.ErrNotFound) {
				c.log.Info("replicated volume deleting: each replica destroys its copy", zap.String("volume", string(id)))
				return nil
			}
			// A state listing no replica goes at once (a creation
			// interrupted before its first entry): the local copy is
			// nobody's to destroy but this call's.
		case !errors.Is(err, ports.ErrNotFound):
			return fmt.Errorf("delete volume %s: its shared state: %w", id, err)
		}
	}
	if !local {
		return nil
	}
	if err := c.store.DestroyVolume(ctx, id); err != nil {
		if errors.Is(err, ports.ErrNotFound) {
			return nil
		}
		if errors.Is(err, ports.ErrBusy) {
			return fmt.Errorf("volume %s is in use: %w: %w", id, refusal.ErrPrecondition, err)
		}
		return err
	}
	c.log.Info("volume deleted", zap.String("volume", string(id)))
	return nil
}

// checkNotInUse applies volume.MayDelete to what this node's mount table
// shows of the volume.
func (c *Service) checkNotInUse(ctx context.Context, id volume.ID) error {
	info, err := c.store.GetVolume(ctx, id)
	if err != nil {
		return err
	}
	points, err := c.mounts.MountsOf(info.MountSource)
	if err != nil {
		return fmt.Errorf("volume %s: reading the mount table: %w", id, err)
	}
	var use volume.Use
	for _, p := range points {
		if p != path.Clean(info.MountPath) {
			use.Mounts = append(use.Mounts, p)
		}
	}
	if v := volume.MayDelete(use); !v.Allowed() {
		return fmt.Errorf("volume %s is %s; unpublish it first: %w", id, v, refusal.ErrPrecondition)
	}
	return nil
}

// ExpandVolume grows a volume to fit the range; a volume already as large is
// left as it is. ZFS filesystems need no node-side step.
func (c *Service) ExpandVolume(ctx context.Context, volumeID string, r volume.CapacityRange) (int64, error) {
	id, err := volume.ParseID("volume_id", volumeID)
	if err != nil {
		return 0, err
	}
	size, err := r.Choose()
	if err != nil {
		return 0, err
	}
	unlock, ok := c.locks.TryLock("volume/" + string(id))
	if !ok {
		return 0, fmt.Errorf("expand volume %s: %w", id, refusal.ErrPending)
	}
	defer unlock()
	info, err := c.store.GetVolume(ctx, id)
	if err != nil {
		return 0, err
	}
	if c.repl.Sizes != nil {
		// Recorded first, so that every copy grows with this one.
		if err := c.repl.Sizes.RecordCapacity(ctx, id, size); err != nil && !errors.Is(err, ports.ErrNotFound) {
			return 0, fmt.Errorf("expand volume %s: recording its size for every copy: %w", id, err)
		}
	}
	if info.CapacityBytes >= size {
		return info.CapacityBytes, nil
	}
	if err := c.store.Resize(ctx, id, size); err != nil {
		return 0, err
	}
	c.log.Info("volume expanded", zap.String("volume", string(id)), zap.Int64("from", info.CapacityBytes), zap.Int64("bytes", size))
	return size, nil
}

// ValidateCapabilities reports whether the volume supports every
// capability: confirmed is false (with a reason) when one is not.
func (c *Service) ValidateCapabilities(ctx context.Context, volumeID string, caps []volume.Capability, params map[string]string) (confirmed bool, reason string, err error) {
	id, err := volume.ParseID("volume_id", volumeID)
	if err != nil {
		return false, "", err
	}
	if len(caps) == 0 {
		return false, "", &volume.InvalidError{Field: "volume_capabilities", Reason: "at least one capability is required"}
	}
	if _, err := c.store.GetVolume(ctx, id); err != nil {
		return false, "", err
	}
	if _, err := volume.ParseParams(params); err != nil {
		return false, err.Error(), nil
	}
	for _, cp := range caps {
		if ok, why := cp.Supported(); !ok {
			return false, why, nil
		}
	}
	return true, "", nil
}

// Capacity is the space available for new volumes in the local pool.
func (c *Service) Capacity(ctx context.Context, params map[string]string) (int64, error) {
	p, err := volume.ParseParams(params)
	if err != nil {
		return 0, err
	}
	if p.Pool != "" && p.Pool != c.cfg.Pool {
		return 0, nil
	}
	if p.Encryption.On() && !c.canEncrypt() {
		// An encrypted StorageClass cannot place a volume here: the
		// scheduler must not pick this node for one.
		return 0, nil
	}
	pc, err := c.store.Capacity(ctx)
	if err != nil {
		return 0, err
	}
	return pc.AvailableBytes, nil
}

// canEncrypt reports whether the store can hold encrypted volumes
// (WithPoolFeatures).
func (c *Service) canEncrypt() bool { return c.pool.CanEncrypt() }

// ListVolumes pages through the volumes by ID: the token is the last ID
// returned, so deletions between pages do not skip entries.
func (c *Service) ListVolumes(ctx context.Context, maxEntries int, startingToken string) ([]Volume, string, error) {
	if maxEntries < 0 {
		return nil, "", &volume.InvalidError{Field: "max_entries", Reason: "must not be negative"}
	}
	all, err := c.store.ListVolumes(ctx)
	if err != nil {
		return nil, "", err
	}
	vols := make([]Volume, 0, len(all))
	for _, v := range all {
		vols = append(vols, c.volume(v, volume.Source{}))
	}
	return page(vols, maxEntries, startingToken, func(v Volume) string { return string(v.ID) })
}

// page returns the entries after token (entries are sorted by key), at
// most max of them (0: all), and the token of the next page. A token is
// "after/<key>": '/' never occurs in a key, so no name can pass for one.
func page[T any](entries []T, max int, token string, key func(T) string) ([]T, string, error) {
	if token != "" {
		after, ok := strings.CutPrefix(token, tokenPrefix)
		if !ok || after == "" {
			return nil, "", fmt.Errorf("starting_token %q: %w", token, ErrInvalidToken)
		}
		start := sort.Search(len(entries), func(i int) bool { return key(entries[i]) > after })
		entries = entries[start:]
	}
	if max > 0 && len(entries) > max {
		return entries[:max], tokenPrefix + key(entries[max-1]), nil
	}
	return entries, "", nil
}

const tokenPrefix = "after/"

// ErrInvalidToken: a pagination token this driver did not hand out.
var ErrInvalidToken = errors.New("invalid pagination token")

// Node is the node whose pool this controller provisions from.
func (c *Service) Node() replica.Node { return c.cfg.Node }
