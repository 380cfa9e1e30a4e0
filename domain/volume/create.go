package volume

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
)

// ErrUnsupported reports a request for something Ferry does not do (block
// volumes, multi-node access, another filesystem): well formed, never
// honoured.
var ErrUnsupported = errors.New("unsupported")

// The external-provisioner's metadata keys (--extra-create-metadata),
// found in Params.Metadata.
const (
	MetaClaimNamespace   = "csi.storage.k8s.io/pvc/namespace"
	MetaClaimName        = "csi.storage.k8s.io/pvc/name"
	MetaPersistentVolume = "csi.storage.k8s.io/pv/name"
)

// CreateRequest is a CreateVolume request as the edge received it: raw,
// every field still to check.
type CreateRequest struct {
	Name         string
	Capacity     CapacityRange
	Capabilities []Capability
	Parameters   map[string]string
	// At most one source: a CSI snapshot ID or a volume ID.
	SourceSnapshotID string
	SourceVolumeID   string
	// Secrets are the provisioner's Secret (the StorageClass's
	// csi.storage.k8s.io/provisioner-secret-*): the key of an encrypted
	// volume. Never logged, never recorded.
	Secrets map[string]string
}

// SourceKind is what a new volume is copied from.
type SourceKind int

const (
	// NoSource: an empty volume.
	NoSource SourceKind = iota
	// FromSnapshot: a CSI snapshot's data.
	FromSnapshot
	// FromVolume: another volume's data (a clone).
	FromVolume
)

// Source is what a new volume's data comes from.
type Source struct {
	Kind SourceKind
	// ID is the CSI snapshot ID or volume ID, as the request gave it (the
	// copy parses it: an unknown one is not found, not invalid).
	ID string
}

// String is how the source is recorded with the volume ("snapshot:ID",
// "volume:ID", or empty), so that a retry with another source is told
// from the first request.
func (s Source) String() string {
	switch s.Kind {
	case FromSnapshot:
		return "snapshot:" + s.ID
	case FromVolume:
		return "volume:" + s.ID
	}
	return ""
}

// CreateSpec is a CreateVolume request checked once, at the edge of the
// domain: the use case acts on it and parses nothing more.
type CreateSpec struct {
	ID ID
	// Name is the request's name, verbatim (the ID is derived from it).
	Name string
	// Capacity is the range asked; Size what Ferry provides of it, and
	// DefaultSize that none was asked (the size is the default).
	Capacity    CapacityRange
	Size        int64
	DefaultSize bool
	Params      Params
	Source      Source
	// ParamsDigest fingerprints the raw parameters: a retried request is
	// told from a conflicting one by it.
	ParamsDigest string
	// Key is the key of an encrypted volume (Params.Encryption on), from
	// the request's Secrets; empty otherwise.
	Key Key
}

// Claim is the namespace and name of the claim the volume was provisioned
// for, when the provisioner said (--extra-create-metadata); empty if not.
func (s CreateSpec) Claim() (namespace, name string) {
	return s.Params.Metadata[MetaClaimNamespace], s.Params.Metadata[MetaClaimName]
}

// PersistentVolume is the name of the volume's PersistentVolume: the
// provisioner's metadata, or, without it, the volume's ID (the provisioner
// names a volume after its PersistentVolume).
func (s CreateSpec) PersistentVolume() string {
	if pv := s.Params.Metadata[MetaPersistentVolume]; pv != "" {
		return pv
	}
	return string(s.ID)
}

// ParseCreate checks a CreateVolume request for a node serving pool, in the
// order a caller fixes mistakes: the name, the capabilities (ErrUnsupported
// for what Ferry does not do), the parameters, the pool, the capacity
// (ErrOutOfRange), the source, the key of an encrypted volume (from the
// provisioner's Secret; an encrypted copy is ErrUnsupported). Every other
// refusal is an *InvalidError.
func ParseCreate(req CreateRequest, pool string) (CreateSpec, error) {
	id, err := ParseID("name", req.Name)
	if err != nil {
		return CreateSpec{}, err
	}
	if len(req.Capabilities) == 0 {
		return CreateSpec{}, &InvalidError{Field: "volume_capabilities", Reason: "at least one capability is required"}
	}
	for _, c := range req.Capabilities {
		if ok, why := c.Supported(); !ok {
			return CreateSpec{}, fmt.Errorf("%s: %w", why, ErrUnsupported)
		}
	}
	params, err := ParseParams(req.Parameters)
	if err != nil {
		return CreateSpec{}, err
	}
	if params.Pool != "" && params.Pool != pool {
		return CreateSpec{}, &InvalidError{Field: "parameters.pool", Value: truncate(params.Pool),
			Reason: fmt.Sprintf("this driver serves pool %q", pool)}
	}
	size, err := req.Capacity.Choose()
	if err != nil {
		return CreateSpec{}, err
	}
	var src Source
	switch {
	case req.SourceSnapshotID != "" && req.SourceVolumeID != "":
		return CreateSpec{}, &InvalidError{Field: "volume_content_source", Reason: "give a snapshot or a volume, not both"}
	case req.SourceSnapshotID != "":
		src = Source{Kind: FromSnapshot, ID: req.SourceSnapshotID}
	case req.SourceVolumeID != "":
		src = Source{Kind: FromVolume, ID: req.SourceVolumeID}
	}
	var key Key
	if params.Encryption.On() {
		if src.Kind != NoSource {
			// A copy is a raw or plaintext stream of its source: it would
			// carry the source's key (or none), not this class's.
			return CreateSpec{}, fmt.Errorf("an encrypted volume restored from a snapshot or cloned from a volume: %w", ErrUnsupported)
		}
		if key, err = ParseKey(params.Encryption.KeyFormat, req.Secrets); err != nil {
			return CreateSpec{}, err
		}
	}
	return CreateSpec{ID: id, Name: req.Name, Capacity: req.Capacity, Size: size, DefaultSize: req.Capacity == CapacityRange{},
		Params: params, Source: src, ParamsDigest: paramsDigest(req.Parameters), Key: key}, nil
}

// paramsDigest fingerprints the StorageClass parameters so that a retried
// CreateVolume can be told from a conflicting one.
func paramsDigest(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%q=%q\n", k, p[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
