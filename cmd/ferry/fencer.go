package main

import (
	"github.com/ferry-csi/ferry/adapters/fence"
	"github.com/ferry-csi/ferry/ports"
)

// newFencer is the daemon's ports.Fencer: writers found in /proc (the
// daemon runs with the host's pid namespace) and killed, then the pods'
// mounts removed.
func newFencer() ports.Fencer { return fence.New(fence.Options{}) }

// newHolderStopper is the volume manager's watchdog's ports.HolderStopper:
// the holders of its volume found in /proc (the replica pod runs with the
// host's pid namespace) and killed; no mount is changed.
func newHolderStopper() ports.HolderStopper { return fence.New(fence.Options{}) }
