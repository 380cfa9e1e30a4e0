// Package zfs implements ports.SnapshotStore and ports.WriteLock on a ZFS
// pool, on OpenZFS 2.x and on the older zfs-fuse CLI alike. What the CLI
// can do is found out here, not decided elsewhere: resumable receives
// (detected at start), whether a volume changed since its newest snapshot
// (the written property, which zfs-fuse lacks).
//
// Commands run as argument lists, never through a shell, with LC_ALL=C so
// that error classification does not depend on the locale. Simple
// mutations (destroy, set, rollback) go through github.com/mistifyio/go-zfs;
// listing, creation and streams go through this package's own runner,
// because go-zfs's listing asks for `zfs list -p` and the `written` and
// `logicalused` properties, which zfs-fuse refuses (go-zfs's create and
// snapshot helpers list the new dataset afterwards, so they fail there too),
// and because its commands take no context.
//
// Layout: the store owns <pool>/<parent>; each volume is the filesystem
// <pool>/<parent>/<volume id>, marked with the user property
// ferry.zfs.csi.io:driver. A child of the parent without that mark is not
// Ferry's: it is never listed, changed or destroyed.
package zfs
