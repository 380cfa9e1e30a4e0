package main

import (
	"github.com/ferry-csi/ferry/adapters/fence"
	"github.com/ferry-csi/ferry/ports"
)

// newFencer is the daemon's ports.Fencer: writers found in /proc (the
// daemon runs with the host's pid namespace) and killed, then the pods'
// mounts removed.
func newFencer() ports.Fencer { return fence.New(fence.Options{}) }
