package ports

import (
	"context"

	"github.com/ferry-csi/ferry/domain/replica"
)

// PendingClaim is a claim that Ferry provisions with Immediate binding
// and that no node has taken yet: nothing (no pod) says where it should
// live.
type PendingClaim struct {
	Namespace, Name string
	// UID identifies this claim for ever (a claim deleted and made again
	// under the same name is another claim).
	UID string
}

// Claims lets the daemons place Immediate claims without a leader
// (Kubernetes: the external-provisioner runs on every node with
// --node-deployment-immediate-binding=false and provisions a claim once
// its volume.kubernetes.io/selected-node annotation names its node).
type Claims interface {
	// Pending lists the claims waiting for a node, and Candidates the
	// nodes that may take one (running Ferry, schedulable, Ready), both
	// from a watched cache: they may lag, since Select checks again.
	Pending(ctx context.Context) ([]PendingClaim, error)
	Candidates(ctx context.Context) ([]replica.Node, error)
	// Select names node as the claim's node if the claim is still the one
	// listed (same UID) and still has none; ErrConflict when another
	// writer got there first (it then has a node, or is gone).
	Select(ctx context.Context, c PendingClaim, node replica.Node) error
	// Changes receives a value (coalesced) after the pending claims or
	// the candidates may have changed.
	Changes() <-chan struct{}
}
