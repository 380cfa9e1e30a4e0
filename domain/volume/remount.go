package volume

import (
	"fmt"
	"strconv"
)

// Term is what a read/write publish of a replicated volume knows, once
// its replica here is meant to be the primary, when it decides whether
// the volume's filesystem must be remounted before the pod's mount.
//
// Why a remount at all: a FUSE-based ZFS (zfs-fuse) keeps file pages
// cached in the kernel across a receive into the mounted filesystem, so a
// copy received into while it was a secondary may show its new writer
// what it held before the receives. A remount drops those pages; a pod's
// bind mount of the filesystem makes it impossible (nothing is unmounted
// from under a pod).
type Term struct {
	// Active: the replica state, read after the replica became the
	// primary, shows this node's replica as the volume's active primary.
	Active bool
	// Epoch is the epoch of that term (replica.State.Epoch); meaningful
	// only when Active. An epoch grows each time a replica becomes the
	// active primary, and an active primary receives nothing, so a
	// filesystem remounted during a term holds no stale page for the
	// rest of it.
	Epoch uint64
	// Remounted is the record kept with the volume (the store's
	// "remounted-epoch" metadata): the epoch of the term the filesystem
	// was last remounted in, as FormatRemounted wrote it; "" when none.
	// It is durable, so it outlives a daemon restart.
	Remounted string
}

// RemountReason says why a remount is needed, or that it is not; a
// closed enum.
type RemountReason int

const (
	// RemountDone: the filesystem was remounted in this very term, and
	// nothing was received since: no remount.
	RemountDone RemountReason = iota
	// RemountUnknownTerm: the state read does not show this node's
	// replica as the active primary (a takeover raced the publish), so
	// no term can vouch for the pages.
	RemountUnknownTerm
	// RemountNeverRecorded: no remount is recorded (a copy received
	// whole, a first term here, or a record lost with a replaced copy).
	RemountNeverRecorded
	// RemountUnreadableRecord: the record is not an epoch this rule
	// wrote.
	RemountUnreadableRecord
	// RemountOtherTerm: the last remount was for another term; the copy
	// may have been received into since (as a secondary, or before a
	// takeover made it the primary without a publish here).
	RemountOtherTerm
)

// RemountVerdict is NeedsRemount's answer with its evidence.
type RemountVerdict struct {
	Reason RemountReason
	// Epoch is the term's epoch (Term.Epoch when Active), Recorded the
	// record as read.
	Epoch    uint64
	Recorded string
}

// Needed reports whether the filesystem must be remounted before a
// read/write mount: every case but RemountDone.
func (v RemountVerdict) Needed() bool { return v.Reason != RemountDone }

// Record reports whether a successful remount is to be recorded, and as
// what (FormatRemounted of the term's epoch): only for a term the state
// shows active here (an active term's epoch is never 0).
func (v RemountVerdict) Record() (string, bool) {
	if v.Reason == RemountUnknownTerm || v.Epoch == 0 {
		return "", false
	}
	return FormatRemounted(v.Epoch), true
}

func (v RemountVerdict) String() string {
	switch v.Reason {
	case RemountDone:
		return fmt.Sprintf("already remounted in epoch %d, this term: nothing was received since", v.Epoch)
	case RemountUnknownTerm:
		return "the replica state does not show this node's replica as the active primary"
	case RemountNeverRecorded:
		return fmt.Sprintf("no remount is recorded for the copy (the term is epoch %d)", v.Epoch)
	case RemountUnreadableRecord:
		return fmt.Sprintf("the remount record %.32q is not an epoch (the term is epoch %d)", v.Recorded, v.Epoch)
	case RemountOtherTerm:
		return fmt.Sprintf("last remounted in epoch %s, and the term is epoch %d: the copy may have been received into since", v.Recorded, v.Epoch)
	}
	return fmt.Sprintf("RemountReason(%d)", int(v.Reason))
}

// NeedsRemount is the rule "a writer never reads pages cached before a
// receive": the filesystem is remounted before a read/write mount unless
// it is known to have been remounted during the current primary term on
// this node. Neither another pod here using the volume nor this node
// already being the primary is such knowledge: a survivor's takeover
// makes a node the primary without a publish (a read-only pod may have
// mounted the copy while it was received into), and a daemon restart
// forgets what it did not record.
func NeedsRemount(t Term) RemountVerdict {
	v := RemountVerdict{Epoch: t.Epoch, Recorded: t.Remounted}
	switch {
	case !t.Active:
		v.Reason, v.Epoch = RemountUnknownTerm, 0
	case t.Remounted == "":
		v.Reason = RemountNeverRecorded
	default:
		e, ok := ParseRemounted(t.Remounted)
		switch {
		case !ok:
			v.Reason = RemountUnreadableRecord
		case e != t.Epoch:
			v.Reason = RemountOtherTerm
		default:
			v.Reason = RemountDone
		}
	}
	return v
}

// FormatRemounted is the record of a remount done in epoch.
func FormatRemounted(epoch uint64) string { return strconv.FormatUint(epoch, 10) }

// ParseRemounted reads a record FormatRemounted wrote; false for anything
// else (signs, leading zeros, spaces, overflow, epoch 0, which no active
// term has).
func ParseRemounted(s string) (uint64, bool) {
	e, err := strconv.ParseUint(s, 10, 64)
	if err != nil || e == 0 || FormatRemounted(e) != s {
		return 0, false
	}
	return e, true
}
