// Package rvapi is Ferry's own Kubernetes resource, ReplicatedVolume
// (group ferry.zfs.csi.io, cluster-scoped, short name rv): one object per
// volume holding what a PersistentVolume cannot (its spec.csi and node
// affinity are immutable). The spec is the volume's desired shape, edited
// by its owner (replicationFactor scales it); the status is the shared
// replica state (domain/replica.State), written only by compare-and-swap
// on resourceVersion through the status subresource, in one request.
//
// The CRD is deploy/crds/crd-replicatedvolume.yaml; these types are its Go
// form, translated to and from the domain here and nowhere else.
package rvapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

const (
	Group    = "ferry.zfs.csi.io"
	Version  = "v1alpha1"
	Kind     = "ReplicatedVolume"
	Resource = "replicatedvolumes"
	// LabelVolume carries the volume ID's hash on every object Ferry makes
	// for a volume (its ReplicatedVolume included), for selection.
	LabelVolume = Group + "/volume"
	// LabelComponent tells a volume's replica pods apart: ComponentPrimary
	// on the active primary's (outside the volume's ReplicaSet), the
	// replica's value on the ReplicaSet's own.
	LabelComponent   = "app.kubernetes.io/component"
	ComponentPrimary = "primary"
	// Finalizer holds a ReplicatedVolume being deleted until its last
	// replica destroyed its copy and left (ports.ClusterState.Delete).
	Finalizer = Group + "/replicas"
	// DeleteIntent ("true") is set by Ferry's DeleteVolume before it
	// deletes a ReplicatedVolume. A deletionTimestamp alone does not make
	// the replicas destroy their copies: deleting the CRD deletes every
	// instance without admission (kubectl delete -k deploy/crds, a CRD
	// re-created on upgrade), and must not destroy every volume.
	DeleteIntent = Group + "/delete"
)

// GVR is the resource's address for dynamic clients and informers.
var GVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// APIVersion is "ferry.zfs.csi.io/v1alpha1".
var APIVersion = Group + "/" + Version

// ReplicatedVolume is one volume.
type ReplicatedVolume struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// Spec is what the volume should be.
type Spec struct {
	// VolumeID is the CSI volume_id (the object's name when that is a
	// valid object name; see ObjectName).
	VolumeID string `json:"volumeID"`
	// ReplicationFactor is how many nodes hold a copy; editing it scales
	// the volume.
	ReplicationFactor int `json:"replicationFactor"`
	// CapacityBytes is the size of every copy.
	CapacityBytes int64 `json:"capacityBytes,omitempty"`
	// SnapshotInterval is how often the primary snapshots (Go duration).
	SnapshotInterval string `json:"snapshotInterval,omitempty"`
	// Properties are the native ZFS properties every copy holds
	// (compression, recordsize, atime), as the StorageClass gave them.
	Properties map[string]string `json:"properties,omitempty"`
	// StorageClassName, PersistentVolumeName and the claim say where it
	// came from (ports.VolumeSpec: written once, at creation, for
	// operators and for the events on the claim; nothing decides on them).
	StorageClassName     string `json:"storageClassName,omitempty"`
	PersistentVolumeName string `json:"persistentVolumeName,omitempty"`
	ClaimNamespace       string `json:"claimNamespace,omitempty"`
	ClaimName            string `json:"claimName,omitempty"`
}

// SnapshotInterval is the spec's snapshot interval when it is one Ferry
// can keep (a Go duration from volume.MinSnapshotInterval to
// volume.MaxSnapshotInterval; the schema refuses other forms), else 0:
// the volume managers keep their own (--snapshot-interval).
func SnapshotInterval(s Spec) time.Duration {
	d, err := time.ParseDuration(s.SnapshotInterval)
	if err != nil || d < volume.MinSnapshotInterval || d > volume.MaxSnapshotInterval {
		return 0
	}
	return d
}

// Describe writes what the volume is into the spec; the spec's volumeID
// and replicationFactor are the state's and stay as they are.
func (s *Spec) Describe(v ports.VolumeSpec) {
	s.CapacityBytes = v.CapacityBytes
	s.SnapshotInterval = ""
	if v.SnapshotInterval > 0 {
		s.SnapshotInterval = v.SnapshotInterval.String()
	}
	s.Properties = nil
	if len(v.Properties) > 0 {
		s.Properties = maps.Clone(v.Properties)
	}
	s.StorageClassName = v.StorageClass
	s.PersistentVolumeName = v.PersistentVolume
	s.ClaimNamespace, s.ClaimName = v.ClaimNamespace, v.ClaimName
}

// Status is the shared replica state and its summary.
type Status struct {
	// Phase, ReadyReplicas, Newest and MaxLag are derived from the rest
	// when it is written (replica.Summarize), for `kubectl get rv`.
	Phase         string `json:"phase,omitempty"`
	ReadyReplicas int    `json:"readyReplicas"`
	Newest        string `json:"newest,omitempty"`
	MaxLag        int64  `json:"maxLag"`
	// NewestTime is when Newest was taken (its holders said so in
	// their snapshotTime); Receiving counts the copies receiving a
	// snapshot now.
	NewestTime *metav1.Time `json:"newestTime,omitempty"`
	Receiving  int          `json:"receiving"`

	Epoch    int64           `json:"epoch,omitempty"`
	Primary  string          `json:"primary,omitempty"`
	Replicas []ReplicaStatus `json:"replicas,omitempty"`
	// Awaiting: the state was rebuilt from the copies after the object
	// was lost, and these nodes have not said yet what they hold
	// (replica.State.Awaiting).
	Awaiting []string `json:"awaiting,omitempty"`
	// Format is the version of the status's layout (StateFormat) its
	// writer used: a reader refuses one newer than it knows
	// (MaxStateFormat) rather than misread it, or drop what it does not
	// know when it writes the status back. 0: written before the field, 1.
	Format int `json:"format,omitempty"`
}

// The status layout's versions. Within a format, the status only gains
// optional fields an older reader may ignore and drop: a change an older
// reader would misread, or lose by writing back, is a new format, written
// only once no daemon or volume manager of a version that cannot read it
// is left (a release after the one that reads it).
const (
	// StateFormat is the format this build writes.
	StateFormat = 1
	// MaxStateFormat is the newest format this build reads.
	MaxStateFormat = 1
)

// ReplicaStatus is one node's copy (replica.Replica).
type ReplicaStatus struct {
	Node          string `json:"node"`
	Snapshot      int64  `json:"snapshot,omitempty"`
	SnapshotEpoch int64  `json:"snapshotEpoch,omitempty"`
	// SnapshotGUID is decimal: a ZFS GUID is a full uint64, beyond what
	// JSON numbers carry exactly.
	SnapshotGUID string       `json:"snapshotGUID,omitempty"`
	Active       bool         `json:"active,omitempty"`
	Ready        bool         `json:"ready,omitempty"`
	Fetching     *SnapshotRef `json:"fetching,omitempty"`
	// Taker: the current primary acknowledged this copy as one that may
	// take the volume over (replica.Replica.Taker).
	Taker bool `json:"taker,omitempty"`
	// Resumed counts the active primary's resumptions after a fence or a
	// publish (replica.Replica.Resumed).
	Resumed int64 `json:"resumed,omitempty"`
	// Forked is set on a primary a takeover replaced (replica.Fork):
	// until it reports a snapshot of that epoch or later, its copy is on
	// the branch the volume's history left.
	Forked *ForkRef `json:"forked,omitempty"`
	// SnapshotTime is when Snapshot was taken, as the copy's store says
	// (replica.Replica.SnapshotTaken): shown, never decided on.
	SnapshotTime *metav1.Time `json:"snapshotTime,omitempty"`
}

// ForkRef is where a takeover made the volume's history leave a copy:
// the takeover's epoch and the successor's snapshot then.
type ForkRef struct {
	Epoch int64       `json:"epoch"`
	At    SnapshotRef `json:"at"`
}

// SnapshotRef names a replication snapshot.
type SnapshotRef struct {
	Snapshot int64  `json:"snapshot"`
	Epoch    int64  `json:"epoch"`
	GUID     string `json:"guid,omitempty"`
}

// ObjectName is the object name of volume id: the ID itself when it is a
// valid DNS subdomain (the external-provisioner's "pvc-<uid>" always is,
// so `kubectl get rv` shows the PV's name), else "rv-" and a hash of it.
// spec.volumeID keeps the real ID, and readers check it.
func ObjectName(id volume.ID) string {
	if len(validation.IsDNS1123Subdomain(string(id))) == 0 {
		return string(id)
	}
	return "rv-" + Hash(id)
}

// Hash is a short stable digest of the volume ID (40 hex digits), valid
// in object names and label values.
func Hash(id volume.ID) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:20])
}

// FromState renders s as the object to write: spec.volumeID and
// spec.replicationFactor from s, the status from s and its summary.
// Version becomes metadata.resourceVersion (the compare of the swap).
func FromState(s replica.State) ReplicatedVolume {
	sum := replica.Summarize(s, s.Deleting)
	rv := ReplicatedVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: ObjectName(s.Volume), ResourceVersion: s.Version},
		Spec:       Spec{VolumeID: string(s.Volume), ReplicationFactor: s.ReplicationFactor},
		Status: Status{
			Phase:         string(sum.Phase),
			ReadyReplicas: sum.Ready,
			MaxLag:        int64(sum.MaxLag),
			Epoch:         int64(s.Epoch),
			Primary:       string(s.Primary),
			Receiving:     sum.Receiving,
			Format:        StateFormat,
		},
	}
	if sum.Newest.Number != 0 {
		rv.Status.Newest = replica.SnapshotName(sum.Newest)
	}
	rv.Status.NewestTime = unixTime(sum.NewestTaken)
	for _, r := range s.Replicas {
		rs := ReplicaStatus{
			Node: string(r.Node), Snapshot: int64(r.Snapshot), SnapshotEpoch: int64(r.SnapshotEpoch),
			Active: r.Active, Ready: r.Ready, Taker: r.Taker, Resumed: int64(r.Resumed),
		}
		if r.SnapshotGUID != 0 {
			rs.SnapshotGUID = strconv.FormatUint(r.SnapshotGUID, 10)
		}
		if r.Fetching.Number != 0 {
			rs.Fetching = snapshotRef(r.Fetching)
		}
		if r.Forked.Epoch != 0 {
			rs.Forked = &ForkRef{Epoch: int64(r.Forked.Epoch), At: *snapshotRef(r.Forked.At)}
		}
		rs.SnapshotTime = unixTime(r.SnapshotTaken)
		rv.Status.Replicas = append(rv.Status.Replicas, rs)
	}
	for _, n := range s.Awaiting {
		rv.Status.Awaiting = append(rv.Status.Awaiting, string(n))
	}
	return rv
}

// unixTime is Unix seconds as an API time; nil for 0 (not said).
func unixTime(sec int64) *metav1.Time {
	if sec <= 0 {
		return nil
	}
	t := metav1.NewTime(time.Unix(sec, 0).UTC())
	return &t
}

func snapshotRef(s replica.Snap) *SnapshotRef {
	ref := &SnapshotRef{Snapshot: int64(s.Number), Epoch: int64(s.Epoch)}
	if s.GUID != 0 {
		ref.GUID = strconv.FormatUint(s.GUID, 10)
	}
	return ref
}

// ToState reads the replica state out of rv. It refuses what the domain
// could not have written (negative numbers, malformed GUIDs): an object
// edited by hand is reported, not trusted.
func ToState(rv ReplicatedVolume) (replica.State, error) {
	if rv.Status.Format > MaxStateFormat {
		return replica.State{}, fmt.Errorf("ReplicatedVolume %s: its status is in format %d, written by a newer Ferry; this one reads formats up to %d (finish the upgrade): %w",
			rv.Name, rv.Status.Format, MaxStateFormat, ports.ErrIncompatible)
	}
	s := replica.State{
		Volume:            volume.ID(rv.Spec.VolumeID),
		ReplicationFactor: rv.Spec.ReplicationFactor,
		Primary:           replica.Node(rv.Status.Primary),
		Version:           rv.ResourceVersion,
		Deleting:          rv.DeletionTimestamp != nil && rv.Annotations[DeleteIntent] == "true",
		SnapshotInterval:  SnapshotInterval(rv.Spec),
		CapacityBytes:     max(0, rv.Spec.CapacityBytes),
	}
	// The schema allows the keys and values Ferry sets; a value it let
	// through that the domain refuses is not applied to any copy, and
	// only that one: the others still are.
	for k, v := range rv.Spec.Properties {
		if p, perr := volume.ParseProperties(map[string]string{k: v}); perr == nil {
			if s.Properties == nil {
				s.Properties = map[string]string{}
			}
			s.Properties[k] = p[k]
		}
	}
	var err error
	num := func(field string, v int64) uint64 {
		if v < 0 && err == nil {
			err = fmt.Errorf("%s is %d: must not be negative", field, v)
		}
		return uint64(v)
	}
	guid := func(field, v string) uint64 {
		if v == "" {
			return 0
		}
		g, perr := strconv.ParseUint(v, 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("%s %q is not a decimal uint64", field, v)
		}
		return g
	}
	s.Epoch = replica.Epoch(num("status.epoch", rv.Status.Epoch))
	for i, r := range rv.Status.Replicas {
		f := fmt.Sprintf("status.replicas[%d]", i)
		rep := replica.Replica{
			Node:          replica.Node(r.Node),
			Snapshot:      replica.SnapshotNumber(num(f+".snapshot", r.Snapshot)),
			SnapshotEpoch: replica.Epoch(num(f+".snapshotEpoch", r.SnapshotEpoch)),
			SnapshotGUID:  guid(f+".snapshotGUID", r.SnapshotGUID),
			Active:        r.Active,
			Ready:         r.Ready,
			Taker:         r.Taker,
			Resumed:       num(f+".resumed", r.Resumed),
		}
		if r.SnapshotTime != nil && r.SnapshotTime.Unix() > 0 {
			rep.SnapshotTaken = r.SnapshotTime.Unix()
		}
		snap := func(field string, ref SnapshotRef) replica.Snap {
			return replica.Snap{
				Number: replica.SnapshotNumber(num(field+".snapshot", ref.Snapshot)),
				Epoch:  replica.Epoch(num(field+".epoch", ref.Epoch)),
				GUID:   guid(field+".guid", ref.GUID),
			}
		}
		if r.Fetching != nil {
			rep.Fetching = snap(f+".fetching", *r.Fetching)
		}
		if r.Forked != nil {
			rep.Forked = replica.Fork{Epoch: replica.Epoch(num(f+".forked.epoch", r.Forked.Epoch)), At: snap(f+".forked.at", r.Forked.At)}
		}
		s.Replicas = append(s.Replicas, rep)
	}
	for _, n := range rv.Status.Awaiting {
		s.Awaiting = append(s.Awaiting, replica.Node(n))
	}
	if err != nil {
		return replica.State{}, fmt.Errorf("ReplicatedVolume %s: %w", rv.Name, err)
	}
	if err := s.Validate(); err != nil {
		return replica.State{}, fmt.Errorf("ReplicatedVolume %s: %w", rv.Name, err)
	}
	return s, nil
}

// UsablePrefix starts every placement label: a node carrying
// UsablePrefix+<key>=UsableValue may run pods using that volume.
const (
	UsablePrefix = "replica." + Group + "/"
	UsableValue  = "ready"
)

// UsableLabel is volume id's placement label key (its topology segment):
// UsablePrefix and the ID when that is a valid label name (63 bytes at
// most; "pvc-<uid>" is 40), else the ID's hash.
func UsableLabel(id volume.ID) string {
	if len(validation.IsQualifiedName(UsablePrefix+string(id))) == 0 {
		return UsablePrefix + string(id)
	}
	return UsablePrefix + Hash(id)
}
