// Package publish carries out the CSI node's use cases (Service): it
// makes a local volume appear in a pod's directory (a bind mount below
// the kubelet directory, read-only when asked), takes it away, reports its
// usage and grows it, each call checked with the domain's rules
// (domain/volume), serialised per volume and idempotent. With replication
// (Replication) it hands a replicated volume over: a read/write publish
// first makes this node's replica the single active primary (its pod
// outside the volume's workload, the promotion by this node's volume
// manager, the takers acknowledged, the filesystem remounted when the
// term needs it), and the last unpublish ends its term with a final
// snapshot. After a takeover, PrepareWriter remounts ahead of the publish
// to follow.
package publish
