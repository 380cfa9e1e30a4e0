// Package volume holds the rules for a Ferry volume as the CSI services see
// it: which names and identifiers are acceptable, which StorageClass
// parameters exist and what values they take, how a requested capacity range
// becomes a size, which access modes a node-local volume can honour (all
// checked at once by ParseCreate), which pod target paths are acceptable,
// whether a volume in use may be deleted (MayDelete) and whether a writer
// needs a fresh mount (NeedsRemount).
//
// Every check returns a typed error (InvalidError, ErrOutOfRange) so that the
// CSI adapter can map it to a gRPC code in one place. Nothing here knows about
// ZFS command lines or Kubernetes objects.
package volume
