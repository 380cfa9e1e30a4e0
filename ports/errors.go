package ports

import "errors"

// Errors every port implementation returns (wrapped, with detail) so that the
// use cases can decide without parsing messages.
var (
	// ErrNotFound: the volume, snapshot or state does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: a create found the object already there.
	ErrExists = errors.New("already exists")
	// ErrNoSpace: the pool cannot hold the requested size or data.
	ErrNoSpace = errors.New("no space left in pool")
	// ErrBusy: the object is in use (mounted, has dependent clones, a
	// transfer is running) and the operation may succeed later.
	ErrBusy = errors.New("busy")
	// ErrConflict: a compare-and-swap lost to a concurrent writer, or an
	// incremental receive into a target modified since its newest snapshot.
	ErrConflict = errors.New("version conflict")
	// ErrBaseMismatch: an incremental stream's base is not the target's
	// newest snapshot (the target moved on or lacks it): plan again.
	ErrBaseMismatch = errors.New("incremental base is not the target's newest snapshot")
	// ErrInvalid: the store refused a value (a property the pool does not
	// support, a malformed stream). Retrying the same call cannot succeed.
	ErrInvalid = errors.New("invalid")
	// ErrNotOwned: the object exists but Ferry did not create it; Ferry
	// never reads, changes or serves it.
	ErrNotOwned = errors.New("not owned by ferry")
	// ErrUnavailable: a peer or service did not answer; the same call may
	// succeed later or against another peer.
	ErrUnavailable = errors.New("unavailable")
	// ErrKeyRejected: the key given for an encrypted volume is not its
	// key (checked before anything is loaded or mounted).
	ErrKeyRejected = errors.New("encryption key rejected")
	// ErrRawUnsupported: an encrypted volume (sent raw only) was asked
	// for by a receiver that cannot take a raw stream (a peer of an older
	// protocol version); upgrading it is the way out, not a retry.
	ErrRawUnsupported = errors.New("the receiver cannot take a raw (encrypted) stream")
	// ErrUnsupported: the implementation cannot do this at all (a state
	// store that cannot watch); the caller falls back (polls).
	ErrUnsupported = errors.New("not supported by this implementation")
	// ErrIncompatible: a peer or a stored object of a version this build
	// does not speak (a rolling update's other side is too old or too
	// new); upgrading the older side is the way out, not a retry.
	ErrIncompatible = errors.New("incompatible version")
)
