package orchestration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Retirer takes the entries of copies gone for good out of the volumes'
// states (replica.Retire): of a node whose object was deleted, for the
// volumes this node shares with it, and this node's own where its pool
// answers that it holds no copy and no volume manager of the volume runs
// here (the node came back with a new, empty pool). The volume's
// ReplicaSet, its pod on the departed node gone, then places a new copy
// elsewhere until the volume has its replication factor again. Every
// daemon listed with a departed node retires it; the first write wins
// and the others find nothing left to change.
type Retirer struct {
	node     replica.Node
	store    Store
	cluster  ports.ClusterState
	nodes    ports.NodeDirectory
	workload ports.ReplicaWorkload
	events   ports.EventRecorder
	log      *zap.Logger

	mu sync.Mutex
	// listed are the nodes each volume's state lists and awaits, as the
	// feed last showed it, for the volumes listing this node.
	listed map[volume.ID][]replica.Node
}

// NewRetirer returns node's retirer.
func NewRetirer(node replica.Node, store Store, cluster ports.ClusterState, nodes ports.NodeDirectory, w ports.ReplicaWorkload, events ports.EventRecorder, log *zap.Logger) *Retirer {
	return &Retirer{node: node, store: store, cluster: cluster, nodes: nodes, workload: w, events: events, log: log, listed: map[volume.ID][]replica.Node{}}
}

// Saw is a listener of the states' feed: it keeps the nodes listed with
// this one, for the next Sync.
func (r *Retirer) Saw(c ports.StateChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, here := c.State.Replica(r.node); c.Gone || !here {
		delete(r.listed, c.Volume)
		return
	}
	var nodes []replica.Node
	for _, x := range c.State.Replicas {
		nodes = append(nodes, x.Node)
	}
	r.listed[c.Volume] = append(nodes, c.State.Awaiting...)
}

// Sync retires, once, what departed. The volumes are those the feed
// showed listing this node before the pool is read: a volume's copy is
// made before its state lists it, so a copy missing from the pool read
// after is missing indeed. Errors of one volume do not stop the others.
func (r *Retirer) Sync(ctx context.Context) error {
	r.mu.Lock()
	listed := make(map[volume.ID][]replica.Node, len(r.listed))
	for id, nodes := range r.listed {
		listed[id] = nodes
	}
	r.mu.Unlock()
	if len(listed) == 0 {
		return nil
	}
	ids := make([]volume.ID, 0, len(listed))
	exists := map[replica.Node]bool{r.node: true}
	var errs []error
	for id, nodes := range listed {
		ids = append(ids, id)
		for _, n := range nodes {
			if _, asked := exists[n]; asked {
				continue
			}
			ok, err := r.nodes.NodeExists(ctx, n)
			if err != nil {
				ok = true // unknown: nothing is retired on it
				errs = append(errs, err)
			}
			exists[n] = ok
		}
	}
	slices.Sort(ids)
	var local map[volume.ID]bool
	if vols, err := r.store.ListVolumes(ctx); err != nil {
		errs = append(errs, fmt.Errorf("list local volumes (no local entry is retired): %w", err))
	} else {
		local = map[volume.ID]bool{}
		for _, v := range vols {
			local[v.ID] = true
		}
	}
	for _, id := range ids {
		if err := r.one(ctx, id, exists, local); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// one retires volume id's departed entries: those of deleted nodes, and
// this node's when local (nil: unread) holds no copy of it.
func (r *Retirer) one(ctx context.Context, id volume.ID, exists map[replica.Node]bool, local map[volume.ID]bool) error {
	gone := func(n replica.Node) bool { e, known := exists[n]; return known && !e }
	empty := false
	if local != nil && !local[id] {
		ws, err := r.workload.Status(ctx, id, r.node)
		switch {
		case errors.Is(err, ports.ErrNotFound):
			// No workload (deleted by hand, or not made yet): its pods may
			// still run, orphaned; the Adopter makes it again first.
			empty = false
		case err != nil:
			return fmt.Errorf("read its workload: %w", err)
		default:
			empty = !ws.OnNode
		}
	}
	anyGone := slices.ContainsFunc(r.listedOf(id), gone)
	if !anyGone && !empty {
		return nil
	}
	var retired []string
	var refused []error
	_, err := r.cluster.Update(ctx, id, func(s *replica.State) error {
		retired, refused = nil, nil
		for _, n := range replica.Retirees(*s, r.node, func(n replica.Node) bool { return !gone(n) }) {
			if changed, err := replica.Retire(s, n, replica.Gone); err != nil {
				refused = append(refused, err)
			} else if changed {
				retired = append(retired, fmt.Sprintf("%s (%s)", n, replica.Gone))
			}
		}
		if empty && replica.EmptyHere(*s, r.node, false, false) {
			if changed, err := replica.Retire(s, r.node, replica.Empty); err != nil {
				refused = append(refused, err)
			} else if changed {
				retired = append(retired, fmt.Sprintf("%s (%s)", r.node, replica.Empty))
			}
		} else if empty {
			if self, ok := s.Replica(r.node); ok && self.Active {
				refused = append(refused, fmt.Errorf("%s is the active primary, and its pool holds no copy: %w", r.node, replica.ErrUnsafe))
			}
		}
		return nil
	})
	if errors.Is(err, ports.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(retired) > 0 {
		msg := "copies gone for good are no longer listed: " + strings.Join(retired, ", ") + "; the volume's ReplicaSet places new copies elsewhere"
		r.log.Warn(msg, zap.String("volume", string(id)))
		r.events.Record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: "CopyRetired", Message: msg})
	}
	for _, e := range refused {
		r.log.Warn("a departed copy stays listed", zap.String("volume", string(id)), zap.Error(e))
	}
	return nil
}

func (r *Retirer) listedOf(id volume.ID) []replica.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listed[id]
}
