// Package volume holds the rules for a Ferry volume as the CSI controller sees
// it: which names and identifiers are acceptable, which StorageClass
// parameters exist and what values they take, how a requested capacity range
// becomes a size, and which access modes a node-local volume can honour.
//
// Every check returns a typed error (InvalidError, ErrOutOfRange) so that the
// CSI adapter can map it to a gRPC code in one place. Nothing here knows about
// ZFS command lines or Kubernetes objects.
package volume
