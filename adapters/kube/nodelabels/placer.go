// Package nodelabels is ports.NodePlacement on a Kubernetes Node's labels:
// replica.ferry.zfs.csi.io/<volume>=ready (rvapi.UsableLabel) for each
// volume that may be used on the node. Only those labels are ever written,
// by a JSON merge patch naming each changed key (deploy's admission policy
// refuses any other change from the daemon's ServiceAccount).
package nodelabels

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Placer labels nodes.
type Placer struct {
	client kubernetes.Interface
}

var _ ports.NodePlacement = (*Placer)(nil)

// New returns a placer using client.
func New(client kubernetes.Interface) *Placer { return &Placer{client: client} }

// Place reads the node's labels and patches the placement labels that
// differ; see ports.NodePlacement.
func (p *Placer) Place(ctx context.Context, node replica.Node, usable, unknown []volume.ID) error {
	n, err := p.client.CoreV1().Nodes().Get(ctx, string(node), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read node %s: %w", node, err)
	}
	patch := Changes(n.Labels, usable, unknown)
	if len(patch) == 0 {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": patch}})
	if err != nil {
		return err
	}
	if _, err := p.client.CoreV1().Nodes().Patch(ctx, string(node), types.MergePatchType, body, metav1.PatchOptions{FieldManager: "ferry-daemon"}); err != nil {
		return fmt.Errorf("label node %s (%d placement labels): %w", node, len(patch), err)
	}
	return nil
}

// Changes is the merge patch of labels that makes current's placement
// labels say usable (value "ready"; nil removes a label): usable ones
// added, other placement labels removed unless they belong to a volume in
// unknown. Other labels are never named. Empty when nothing differs.
func Changes(current map[string]string, usable, unknown []volume.ID) map[string]any {
	want := map[string]bool{}
	for _, id := range usable {
		want[rvapi.UsableLabel(id)] = true
	}
	keep := map[string]bool{}
	for _, id := range unknown {
		keep[rvapi.UsableLabel(id)] = true
	}
	patch := map[string]any{}
	for k := range want {
		if current[k] != rvapi.UsableValue {
			patch[k] = rvapi.UsableValue
		}
	}
	for k := range current {
		if strings.HasPrefix(k, rvapi.UsablePrefix) && !want[k] && !keep[k] {
			patch[k] = nil
		}
	}
	return patch
}
