package peer

import (
	"time"

	"github.com/ferry-csi/ferry/domain/volume"
)

// SnapshotsRequest asks for a volume's replication snapshots, or with CSI
// for its CSI snapshots instead (a restore on a node without the
// snapshot; a server before them ignores the field and lists replication
// snapshots, none of which a restore takes for its snapshot).
type SnapshotsRequest struct {
	Volume string `json:"volume"`
	CSI    bool   `json:"csi,omitempty"`
}

// SnapshotsResponse lists them, oldest first.
type SnapshotsResponse struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// Snapshot describes one snapshot on the wire.
type Snapshot struct {
	Name      string            `json:"name"`
	GUID      uint64            `json:"guid"`
	CreateTxg uint64            `json:"createTxg"`
	SizeBytes int64             `json:"sizeBytes"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

// SendRequest asks for a stream of To, incremental from From when set. To
// is a replication snapshot, or a CSI snapshot (its name in the store,
// volume.IsSnapshotStoreName) sent whole: no From, no ResumeToken.
type SendRequest struct {
	Volume      string `json:"volume"`
	From        string `json:"from,omitempty"`
	To          string `json:"to"`
	ResumeToken string `json:"resumeToken,omitempty"`
	// Accept lists what the receiver's pool takes beyond a plain stream
	// ("compressed", "large-blocks", "embedded"); absent: a plain stream
	// (an older client says nothing). Unknown names are ignored.
	Accept []string `json:"accept,omitempty"`
}

// PromiseRequest asks the peer not to take the asking node's volumes
// over for a while (domain/liveness): sent by a node that cannot renew its
// lease, so that an API server outage alone does not stop its writes.
type PromiseRequest struct {
	Node string `json:"node"` // the asking node
}

// PromiseResponse is the peer's answer: granted for Span (nanoseconds,
// measured by the asker from when it sent the request), or refused.
type PromiseResponse struct {
	Granted bool   `json:"granted"`
	Span    int64  `json:"span,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

const (
	serviceName     = "ferry.peer.v1.Peer"
	methodSnapshots = "/" + serviceName + "/Snapshots"
	methodSend      = "/" + serviceName + "/Send"
	methodPromise   = "/" + serviceName + "/Promise"
)

// ChunkSize is the most bytes one stream message carries. Large pieces
// matter: measured here, a TCP hop written in 8 KiB pieces ran at 0.3 to
// 0.6 of a raw `zfs send | zfs recv` pipe, in 1 MiB pieces at about 1.
const ChunkSize = 1 << 20

// Flow-control windows and socket buffers sized for bulk streams: gRPC's
// defaults (64 KiB windows grown by estimation, 32 KiB buffers) keep a
// stream of 1 MiB messages waiting on window updates.
const (
	windowSize = 32 << 20
	bufferSize = 1 << 20
)

// Liveness: a peer that stops answering must not hold a replica's single
// decision loop. Pings find dead connections; a listing has a deadline; a
// stream that delivers nothing for streamIdle is cancelled.
const (
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 20 * time.Second
	listTimeout      = 30 * time.Second
	streamIdle       = 2 * time.Minute
)

// The names of volume.StreamFeatures on the wire.
const (
	featureCompressed  = "compressed"
	featureLargeBlocks = "large-blocks"
	featureEmbedded    = "embedded"
)

func featureNames(f volume.StreamFeatures) []string {
	var out []string
	if f.Compressed {
		out = append(out, featureCompressed)
	}
	if f.LargeBlocks {
		out = append(out, featureLargeBlocks)
	}
	if f.Embedded {
		out = append(out, featureEmbedded)
	}
	return out
}

// parseFeatures reads a client's list; names it does not know (a newer
// client's) are left out: never sent what this build cannot tell apart.
func parseFeatures(names []string) volume.StreamFeatures {
	var f volume.StreamFeatures
	for _, n := range names {
		switch n {
		case featureCompressed:
			f.Compressed = true
		case featureLargeBlocks:
			f.LargeBlocks = true
		case featureEmbedded:
			f.Embedded = true
		}
	}
	return f
}
