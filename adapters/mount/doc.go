// Package mount implements ports.Mounter on Linux with bind mounts made by
// mount(2) and the mount table read from /proc/self/mountinfo: no mount(8)
// binary, no shell. Target paths are walked with openat2(2) without
// following any symlink, and changed only through descriptors of the
// directories that were checked (see Linux).
package mount
