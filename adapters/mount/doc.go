// Package mount implements ports.Mounter on Linux with bind mounts made by
// mount(2) and the mount table read from /proc/self/mountinfo: no mount(8)
// binary, no shell.
package mount
