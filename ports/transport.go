package ports

import (
	"context"
	"io"

	"github.com/ferry-csi/ferry/domain/replica"
)

// Transport carries snapshot streams between nodes.
type Transport interface {
	// Fetch asks the peer on node for req's stream. The caller must Close
	// it; closing early or cancelling ctx stops the peer's sender.
	// ErrNotFound if the peer lacks the snapshot; ErrNotOwned if the peer
	// refuses a dataset Ferry does not own.
	Fetch(ctx context.Context, node replica.Node, req SendRequest) (io.ReadCloser, error)
}
