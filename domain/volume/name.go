package volume

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// ID identifies a volume everywhere Ferry stores it: it is the CSI volume_id,
// the last component of the dataset on every node, and the key of the
// volume's replica list. It is the CSI name the volume was created with,
// accepted only when it is safe as a ZFS name component, so that a retried
// CreateVolume finds the same dataset without a lookup table.
type ID string

// MaxNameLength bounds volume and snapshot names at 128 bytes, the size
// CSI recommends for strings. ZFS limits a full name (pool/parent/volume@
// snapshot) to 255 bytes: 64 for the pool and parent, 128 for the volume
// and at most 61 for the snapshot part (see SnapshotRef.StoreName) fit.
const (
	MaxNameLength         = 128
	MaxSnapshotNameLength = 128
	// MaxStoreSnapshotName bounds every snapshot name Ferry gives the store.
	MaxStoreSnapshotName = 61
)

// ParseID validates a name or volume_id from a request. Accepted: 1 to
// MaxNameLength characters from [A-Za-z0-9_.-], starting with a letter or a
// digit. Everything else (path separators, '@', '%', shell metacharacters,
// spaces, control bytes, "..") is refused rather than rewritten: a rewritten
// name could collide with another volume's.
func ParseID(field, s string) (ID, error) {
	if err := checkName(field, s, MaxNameLength); err != nil {
		return "", err
	}
	return ID(s), nil
}

func checkName(field, s string, max int) error {
	switch {
	case s == "":
		return invalid(field, s, "must not be empty")
	case len(s) > max:
		return invalid(field, s, fmt.Sprintf("longer than %d bytes", max))
	case !isAlnum(s[0]):
		return invalid(field, s, "must start with a letter or a digit")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return invalid(field, s, fmt.Sprintf("character %q at offset %d is not allowed (allowed: letters, digits, '-', '_', '.')", c, i))
		}
	}
	if strings.Contains(s, "..") {
		return invalid(field, s, `must not contain ".."`)
	}
	return nil
}

func isAlnum(c byte) bool {
	return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}

// SnapshotRef names a CSI snapshot: the volume it was taken of and its CSI
// name. Its ID, "<volume>@<name>", is the CSI snapshot_id.
type SnapshotRef struct {
	Volume ID
	Name   string
}

// csiSnapshotPrefix keeps snapshots taken through CSI apart from the numbered
// replication snapshots ("ferry-<n>", package replica), so that neither can
// shadow or delete the other.
const csiSnapshotPrefix = "csi-"

// ID returns the CSI snapshot_id.
func (r SnapshotRef) ID() string { return string(r.Volume) + "@" + r.Name }

// StoreName is the snapshot's name inside the volume's dataset: the CSI
// name behind a prefix when it is short, else a digest of it (the CSI name
// is then kept in the snapshot's metadata).
func (r SnapshotRef) StoreName() string {
	if len(csiSnapshotPrefix)+len(r.Name) <= shortSnapshotName {
		return csiSnapshotPrefix + r.Name
	}
	return hashedSnapshotPrefix + Digest(r.Name)
}

// A hashed name starts "csi--": a CSI name never starts with '-', so no
// short name can alias a hashed one.
const (
	shortSnapshotName    = 48
	hashedSnapshotPrefix = "csi--"
)

// Digest is a short, stable fingerprint of s for names that must fit ZFS's
// limits (32 hex digits of SHA-256).
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// ParseSnapshotName validates a CSI snapshot name.
func ParseSnapshotName(field, s string) (string, error) {
	if err := checkName(field, s, MaxSnapshotNameLength); err != nil {
		return "", err
	}
	return s, nil
}

// ParseSnapshotID validates a CSI snapshot_id of the form "<volume>@<name>".
func ParseSnapshotID(field, s string) (SnapshotRef, error) {
	vol, name, ok := strings.Cut(s, "@")
	if !ok {
		return SnapshotRef{}, invalid(field, s, `must have the form "<volume>@<snapshot>"`)
	}
	id, err := ParseID(field, vol)
	if err != nil {
		return SnapshotRef{}, err
	}
	if _, err := ParseSnapshotName(field, name); err != nil {
		return SnapshotRef{}, err
	}
	return SnapshotRef{Volume: id, Name: name}, nil
}

// SnapshotRefFromStore returns the CSI snapshot a store snapshot stands for,
// given its store name and the CSI name recorded with it (may be empty), and
// false for snapshots that are not CSI snapshots (replication ones).
func SnapshotRefFromStore(vol ID, storeName, recorded string) (SnapshotRef, bool) {
	if recorded != "" {
		ref := SnapshotRef{Volume: vol, Name: recorded}
		if checkName("snapshot", recorded, MaxSnapshotNameLength) == nil && ref.StoreName() == storeName {
			return ref, true
		}
	}
	name, ok := strings.CutPrefix(storeName, csiSnapshotPrefix)
	if !ok || strings.HasPrefix(storeName, hashedSnapshotPrefix) || checkName("snapshot", name, MaxSnapshotNameLength) != nil {
		return SnapshotRef{}, false
	}
	ref := SnapshotRef{Volume: vol, Name: name}
	return ref, ref.StoreName() == storeName
}

// IsSnapshotStoreName reports whether s is a name StoreName gives: a
// short one ("csi-" and a valid CSI name, at most 48 bytes) or a hashed
// one ("csi--" and 32 lower-case hex digits). A peer is served a CSI
// snapshot by such a name only (adapters/peer).
func IsSnapshotStoreName(s string) bool {
	if digest, ok := strings.CutPrefix(s, hashedSnapshotPrefix); ok {
		if len(digest) != 32 {
			return false
		}
		for i := 0; i < len(digest); i++ {
			if c := digest[i]; !('0' <= c && c <= '9') && !('a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	name, ok := strings.CutPrefix(s, csiSnapshotPrefix)
	return ok && len(s) <= shortSnapshotName && checkName("snapshot", name, MaxSnapshotNameLength) == nil
}
