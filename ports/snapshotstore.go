package ports

import (
	"context"
	"io"
	"time"

	"github.com/ferry-csi/ferry/domain/volume"
)

// SnapshotStore is one node's storage: a volume is a dataset, holding
// snapshots, which can be streamed out and in. An implementation serves one
// pool and a parent dataset in it that Ferry owns; volume IDs and snapshot
// names it receives are already validated by the domain.
//
// Methods are safe for concurrent use on different volumes; the use cases
// serialise calls on one volume. Unless stated, a method returns ErrNotFound
// (wrapped) when the volume or snapshot is absent.
type SnapshotStore interface {
	// CreateVolume creates an empty volume with the given capacity, native
	// properties and Ferry metadata, mounted at its MountPath. All of it is
	// set in one step: a volume never exists without its metadata.
	// ErrExists if the volume exists; ErrNoSpace if the pool cannot reserve
	// the capacity; ErrInvalid if the pool refuses a property value.
	CreateVolume(ctx context.Context, id volume.ID, opts CreateOptions) (VolumeInfo, error)
	// GetVolume describes a volume.
	GetVolume(ctx context.Context, id volume.ID) (VolumeInfo, error)
	// ListVolumes describes every volume in the store, sorted by ID.
	ListVolumes(ctx context.Context) ([]VolumeInfo, error)
	// DestroyVolume destroys a volume and all its snapshots. ErrBusy while
	// something (a bind mount, a clone) still uses it.
	DestroyVolume(ctx context.Context, id volume.ID) error
	// Resize sets the volume's capacity. ErrNoSpace if the pool cannot
	// reserve it; ErrInvalid if it is below the data already written.
	Resize(ctx context.Context, id volume.ID, capacityBytes int64) error
	// SetProperties sets native properties from the allow-list (see
	// CreateOptions.Properties). ErrInvalid if the pool refuses a value.
	SetProperties(ctx context.Context, id volume.ID, properties map[string]string) error
	// SetMetadata merges Ferry metadata keys into the volume's.
	SetMetadata(ctx context.Context, id volume.ID, metadata map[string]string) error
	// Remount unmounts the volume's filesystem and mounts it again, so
	// that readers see what the dataset holds now: a FUSE-based ZFS
	// (zfs-fuse) leaves file pages cached in the kernel across a receive
	// into the mounted filesystem, and a replica that becomes the primary
	// would show its pod stale data. ErrBusy while something uses the
	// mount (a pod's bind mount). The caller records a remount it may
	// rely on later with SetMetadata (MetaRemountedEpoch): the store
	// keeps that record across restarts, and a stream never carries it.
	Remount(ctx context.Context, id volume.ID) error
	// Unchanged reports whether the pool can tell that nothing was written
	// to the volume since its newest snapshot (OpenZFS: the written
	// property is 0). False when something was written, when the volume
	// has no snapshot, or when the pool cannot tell (zfs-fuse has no
	// written property): a periodic snapshot is then taken.
	Unchanged(ctx context.Context, id volume.ID) (bool, error)
	// Capacity reports the bytes available for new volumes and the pool's size.
	Capacity(ctx context.Context) (PoolCapacity, error)

	// LoadKey ensures the key of a volume Ferry encrypted is loaded and
	// its filesystem mounted: the key is first checked without loading
	// it, every time (also when it is already loaded), so that a wrong
	// key answers ErrKeyRejected and changes nothing; a key already
	// loaded is not loaded again, and an unmounted filesystem is mounted. ErrInvalid for a volume that is not encrypted, or a store
	// that cannot encrypt. The key reaches the store's tool only on its
	// standard input: never an argument, a file or the environment.
	LoadKey(ctx context.Context, id volume.ID, key volume.Key) error
	// UnloadKey unmounts an encrypted volume's filesystem and unloads its
	// key, so that the node holds only ciphertext; a key not loaded, or a
	// volume that is not encrypted, is fine. ErrBusy while something
	// (a pod's bind mount) still uses the filesystem.
	UnloadKey(ctx context.Context, id volume.ID) error

	// CreateSnapshot takes an atomic snapshot named name. ErrExists if a
	// snapshot of that name exists on the volume.
	CreateSnapshot(ctx context.Context, id volume.ID, name string, metadata map[string]string) (SnapshotInfo, error)
	// SetSnapshotMetadata merges Ferry metadata keys into a snapshot's.
	// Streams do not carry metadata, so replication puts what a receiver
	// must know (the epoch) in the snapshot's name instead.
	SetSnapshotMetadata(ctx context.Context, id volume.ID, name string, metadata map[string]string) error
	// ListSnapshots lists a volume's snapshots, oldest first, or those of
	// every volume when id is empty (sorted by volume, then age).
	ListSnapshots(ctx context.Context, id volume.ID) ([]SnapshotInfo, error)
	// DestroySnapshot destroys one snapshot. ErrBusy if a clone depends on it.
	DestroySnapshot(ctx context.Context, id volume.ID, name string) error
	// Rollback discards every change after snapshot name, destroying the
	// snapshots newer than it. Only the replication core asks for this, and
	// only with its reason logged.
	Rollback(ctx context.Context, id volume.ID, name string) error
	// KeepAside copies the volume as it is now (its newest data, changes
	// never snapshotted included) into a copy of its own, named after
	// name, outside the store's volumes: no listing of volumes or
	// snapshots shows it, and neither a rollback nor the destruction of
	// the volume touches it. The copy is protected against an accidental
	// destruction (ZFS: a held snapshot) until an operator drops it.
	// Called again with the same name, it returns the copy already made
	// (whatever the volume holds since). ErrNoSpace when the pool cannot
	// hold the copy: nothing is made. Only the replication core asks for
	// this, before a rollback discards writes of a fenced primary.
	KeepAside(ctx context.Context, id volume.ID, name string) (KeptCopy, error)

	// Send streams snapshot req.To, incrementally from req.From when set.
	// The caller must Close the stream; closing it early (or cancelling ctx)
	// stops the sender and releases its process.
	Send(ctx context.Context, req SendRequest) (io.ReadCloser, error)
	// ResumeToken returns the token of an interrupted receive into the
	// volume (or into its staging, for a full stream), "" when there is
	// none or the store cannot resume (zfs-fuse). A transfer that has one
	// asks the sender to resume with it (SendRequest.ResumeToken).
	ResumeToken(ctx context.Context, id volume.ID) (string, error)
	// DiscardPartial throws away an interrupted receive's state, so that
	// the next transfer starts from the last complete snapshot.
	DiscardPartial(ctx context.Context, id volume.ID) error
	// Receive applies a stream made by Send, with the snapshot's data and
	// GUID but not its metadata. A full stream creates the volume
	// (ErrExists if it exists); an incremental one applies on top of
	// its base and fails if the volume changed since: Receive never rolls
	// back on its own. On failure nothing partial is left behind, except a
	// resumable state where the store supports it (none yet).
	Receive(ctx context.Context, id volume.ID, stream io.Reader) error
	// ReceiveReplacement receives a full stream made by Send into staging
	// while the volume's current copy stays in place and untouched. Only
	// once the stream is complete does it call commit (which records, by
	// compare-and-swap, that the old copy is no longer counted); if commit
	// succeeds it destroys the old copy, keeping its Ferry metadata on the
	// new one, and moves the new copy in place. If the stream fails or
	// commit returns an error, the received data is discarded and the old
	// copy is kept as it was. A volume that does not exist is received as
	// Receive would (commit is still called first).
	ReceiveReplacement(ctx context.Context, id volume.ID, stream io.Reader, commit func(context.Context) error) error
}

// CreateOptions describe a new volume.
type CreateOptions struct {
	CapacityBytes int64
	// Properties are native store properties from the allow-list in
	// volume.ParseParams (compression, recordsize, atime).
	Properties map[string]string
	// Metadata is Ferry's own data about the volume (see the Meta* keys),
	// stored with it so that a node can rediscover what it holds.
	Metadata map[string]string
	// Encryption, when on, makes the volume its own encryption root with
	// Key (loaded at once); the store records the decision as
	// MetaEncryption in the same step. A plaintext volume gets no record
	// (as before encryption: no record and a plaintext dataset are sent
	// as plaintext). A store that cannot encrypt answers
	// volume.ErrUnsupported for an encrypted one and makes nothing.
	Encryption volume.Encryption
	Key        volume.Key
}

// Metadata keys Ferry records on every volume it creates.
const (
	MetaDriver            = "driver"             // the CSI driver name: marks ownership
	MetaVolume            = "volume"             // the volume ID
	MetaName              = "name"               // the CSI name of the CreateVolume request
	MetaReplicationFactor = "replication-factor" // at creation
	MetaSource            = "source"             // the snapshot or volume it was copied from
	MetaParams            = "params"             // a digest of the StorageClass parameters
	MetaPVC               = "pvc"                // namespace/name, when the provisioner tells
	// MetaRemountedEpoch is set by the node, not at creation: the epoch
	// of the primary term its filesystem was last remounted in
	// (volume.FormatRemounted; volume.NeedsRemount reads it).
	MetaRemountedEpoch = "remounted-epoch"
	// MetaWritesLocked is set by a WriteLock while it holds the volume
	// read-only (why, for the operator), and removed when it lifts it.
	MetaWritesLocked = "writes-locked"
	// MetaEncryption is Ferry's decision on encryption
	// (volume.Encryption.Record: "<cipher>/<keyformat>"; "off" is read as
	// an ordinary volume, never written), set by the store at creation of
	// an encrypted volume and on a copy received whole from a raw stream
	// (volume.RecordReceived); a plaintext volume or copy has none, as on
	// main. Every send reads it (volume.DecideSend).
	MetaEncryption = "encryption"

	// On snapshots:
	MetaSnapshotName = "snapshot-name" // the CSI name of a CreateSnapshot request
)

// MetadataKeys lists every metadata key a store must keep. Stores may drop
// keys outside this list (the ZFS adapter asks for these by name).
var MetadataKeys = []string{
	MetaDriver, MetaVolume, MetaName, MetaReplicationFactor, MetaSource, MetaParams, MetaPVC,
	MetaRemountedEpoch, MetaWritesLocked, MetaSnapshotName,
}

// EncryptionMetadataKeys are the metadata keys a store that can encrypt
// keeps besides MetadataKeys (a store that cannot, zfs-fuse, is asked for
// exactly what it was before encryption).
var EncryptionMetadataKeys = []string{MetaEncryption}

// VolumeInfo describes a volume in the store.
type VolumeInfo struct {
	ID             volume.ID
	CapacityBytes  int64 // the quota: what the volume's user may write
	UsedBytes      int64 // bytes referenced by the live filesystem
	AvailableBytes int64 // bytes the volume's user can still write
	MountPath      string
	// MountSource is how the mount table names the volume's filesystem, so
	// that a bind mount can be traced back to it.
	MountSource string
	Properties  map[string]string // native properties named in CreateOptions
	Metadata    map[string]string // Ferry metadata keys
	// Encryption is what the pool says of the dataset's encryption; a
	// store that cannot encrypt says "off", known.
	Encryption volume.Stored
}

// SnapshotInfo describes a snapshot.
type SnapshotInfo struct {
	Volume volume.ID
	Name   string
	// GUID identifies the snapshot's contents across nodes: the same
	// snapshot received elsewhere keeps its GUID, a different one never
	// shares it. Replication matches bases by GUID, never by name alone.
	GUID uint64
	// CreateTxg orders a volume's snapshots (the pool's transaction group).
	CreateTxg uint64
	CreatedAt time.Time
	// SizeBytes is what the snapshot references: the size of a volume
	// restored from it.
	SizeBytes int64
	Metadata  map[string]string
}

// KeptCopies lists the copies a store kept aside (SnapshotStore.KeepAside)
// that no operator has dropped yet: what `kubectl ferry fenced` and the
// node daemon's metrics show.
type KeptCopies interface {
	// ListKept lists them, sorted by Name; none: an empty list.
	ListKept(ctx context.Context) ([]KeptCopy, error)
}

// KeptCopy is a copy of a volume kept aside (SnapshotStore.KeepAside).
type KeptCopy struct {
	// Name is what an operator looks for (ZFS: the held dataset@snapshot).
	Name string
	// Volume is the volume it was kept from; Taken when (zero: unknown).
	Volume volume.ID
	Taken  time.Time
	// Root is where the store keeps every copy (ZFS: the dataset the kept
	// datasets are directly below): a tool dropping one checks it is there.
	Root string
	// Inspect and Drop say, in the store's own terms, how to look at the
	// copy and how to destroy it once it is no longer wanted.
	Inspect, Drop string
	// SizeBytes is what the copy references.
	SizeBytes int64
}

// PoolCapacity is the space of the store's pool.
type PoolCapacity struct {
	AvailableBytes int64
	TotalBytes     int64
}

// SendRequest selects a stream: From empty means a full stream of To.
// ResumeToken, when set, continues an interrupted transfer of From..To
// where it stopped; the sender checks that the token names that snapshot
// of that volume.
type SendRequest struct {
	Volume      volume.ID
	From        string
	To          string
	ResumeToken string
	// PlaintextOnly: the receiver cannot take a raw (encrypted) stream
	// (a peer of protocol version 1): a volume sent raw is refused with
	// ErrRawUnsupported, never sent another way. Plaintext volumes are
	// sent as ever.
	PlaintextOnly bool
	// Accept is what the receiver's pool takes beyond a plain stream
	// (volume.StreamFeatures): the sender adds what its own pool can send
	// of it (volume.SendFeatures). None: a plain stream, as a receiver
	// that says nothing (an older peer) gets.
	Accept volume.StreamFeatures
}

// PoolFeatures is what a store's pool can do beyond plain volumes, found
// out when the store opens (the ZFS store asks its pool; a store in
// memory can do none of it). Its users get it given, beside the store.
type PoolFeatures interface {
	// StreamFeatures is what the pool sends and takes beyond plain
	// streams (OpenZFS's compressed, large-block and embedded streams);
	// none: plain streams only.
	StreamFeatures() volume.StreamFeatures
	// CanEncrypt says whether the pool can hold encrypted volumes.
	CanEncrypt() bool
}

// NoPoolFeatures is a pool that can do nothing beyond plain volumes.
type NoPoolFeatures struct{}

func (NoPoolFeatures) StreamFeatures() volume.StreamFeatures { return volume.StreamFeatures{} }
func (NoPoolFeatures) CanEncrypt() bool                      { return false }
