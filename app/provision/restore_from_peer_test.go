package provision_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/faketransport"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// leases is the nodes with a Ferry lease.
type leases []replica.Node

func (l leases) Leases(context.Context) (map[replica.Node]ports.LeaseRecord, error) {
	m := map[replica.Node]ports.LeaseRecord{}
	for _, n := range l {
		m[n] = ports.LeaseRecord{Value: "1"}
	}
	return m, nil
}

// askLog records which nodes were asked for CSI snapshots (in no
// particular order: every node is asked at once) and which were fetched
// from.
type askLog struct {
	*faketransport.Network
	mu      sync.Mutex
	asked   []replica.Node
	fetched []replica.Node
}

func (a *askLog) Fetch(ctx context.Context, node replica.Node, req ports.SendRequest) (io.ReadCloser, error) {
	a.mu.Lock()
	a.fetched = append(a.fetched, node)
	a.mu.Unlock()
	return a.Network.Fetch(ctx, node, req)
}

func (a *askLog) askedSorted() []replica.Node {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(slices.Values(a.asked))
}

func (a *askLog) CSISnapshots(ctx context.Context, node replica.Node, id volume.ID) ([]ports.SnapshotInfo, error) {
	a.mu.Lock()
	a.asked = append(a.asked, node)
	a.mu.Unlock()
	return a.Network.CSISnapshots(ctx, node, id)
}

// peerRestore is three nodes: node-2 holds volume src and its CSI snapshot
// s1 (a file written before it, another after); node-1 restores; node-3
// holds nothing.
type peerRestore struct {
	net            *askLog
	n1, n2, n3     *memstore.Store
	restorer       *provision.Service
	states         *fakecluster.Store
	n1Dir, srcPath string
}

func newPeerRestore(t *testing.T) *peerRestore {
	t.Helper()
	p := &peerRestore{net: &askLog{Network: faketransport.New()}, states: fakecluster.New(), n1Dir: t.TempDir()}
	p.n1, p.n2, p.n3 = memstore.New(p.n1Dir, 1<<30, 1), memstore.New(t.TempDir(), 1<<30, 2), memstore.New(t.TempDir(), 1<<30, 3)
	p.net.Add("node-1", p.n1)
	p.net.Add("node-2", p.n2)
	p.net.Add("node-3", p.n3)
	src := provision.New(provision.Config{Node: "node-2", Pool: "ferry"}, p.n2, noMounts{}, zap.NewNop())
	v, err := src.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "src", Capacity: volume.CapacityRange{RequiredBytes: volume.MiB}, Capabilities: rw})
	if err != nil {
		t.Fatal(err)
	}
	info, err := p.n2.GetVolume(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	p.srcPath = info.MountPath
	write(t, filepath.Join(p.srcPath, "before"), "in the snapshot")
	if _, err := src.CreateSnapshot(ctx, "s1", "src"); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(p.srcPath, "after"), "not in the snapshot")
	p.restorer = provision.New(cfg, p.n1, noMounts{}, zap.NewNop(),
		provision.WithReplication(provision.Replication{Cluster: p.states}),
		provision.WithPeers(provision.Peers{Transport: p.net, Nodes: leases{"node-1", "node-2", "node-3"}}))
	return p
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestARestoreOnANodeWithoutTheSnapshotFetchesItWholeFromThePeerThatHoldsIt(t *testing.T) {
	p := newPeerRestore(t)
	req := provision.CreateVolumeRequest{Name: "restored", Capacity: volume.CapacityRange{RequiredBytes: 2 * volume.MiB}, Capabilities: rw, SourceSnapshotID: "src@s1",
		Parameters: map[string]string{"compression": "on"}}
	v, err := p.restorer.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if v.Node != "node-1" || v.SourceSnapshotID != "src@s1" || v.CapacityBytes != 2*volume.MiB {
		t.Fatalf("volume %+v: want it on node-1, of 2 MiB, from src@s1", v)
	}
	info, err := p.n1.GetVolume(ctx, "restored")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(info.MountPath, "before")); err != nil || string(b) != "in the snapshot" {
		t.Fatalf("restored file: %q, %v: want the snapshot's data", b, err)
	}
	if _, err := os.Stat(filepath.Join(info.MountPath, "after")); !os.IsNotExist(err) {
		t.Fatalf("a file written after the snapshot is in the restore: %v", err)
	}
	if info.Metadata[ports.MetaName] != "restored" || info.Properties["compression"] != "on" {
		t.Fatalf("restored volume %+v: want its name recorded and the class's properties", info)
	}
	// Only the new volume is made here: no copy of src, no snapshot left.
	if _, err := p.n1.GetVolume(ctx, "src"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the source volume appeared on the restoring node: %v", err)
	}
	if snaps, _ := p.n1.ListSnapshots(ctx, "restored"); len(snaps) != 0 {
		t.Fatalf("the restored volume keeps snapshots %v", snaps)
	}
	// A retried CreateVolume answers the same volume, fetching nothing.
	asked := len(p.net.asked)
	if again, err := p.restorer.CreateVolume(ctx, req); err != nil || again.ID != v.ID {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	if len(p.net.asked) != asked {
		t.Fatalf("a retry of a restore done asked the peers again: %v", p.net.asked[asked:])
	}
}

func TestARestoreTakesTheSnapshotFromTheSourceVolumesCopiesFirst(t *testing.T) {
	p := newPeerRestore(t)
	// node-3 holds a copy of src with the snapshot too (as replication
	// would have left it), and src's ReplicatedVolume lists it: it is
	// fetched from, not node-2, which comes first by name.
	stream, err := p.n2.Send(ctx, ports.SendRequest{Volume: "src", To: volume.SnapshotRef{Volume: "src", Name: "s1"}.StoreName()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.n3.Receive(ctx, "src", stream); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	if _, err := p.states.Create(ctx, replica.State{Volume: "src", ReplicationFactor: 2, Epoch: 1, Primary: "node-3",
		Replicas: []replica.Replica{{Node: "node-3", Active: true}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.restorer.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "restored", Capabilities: rw, SourceSnapshotID: "src@s1"}); err != nil {
		t.Fatal(err)
	}
	if want := []replica.Node{"node-3"}; !slices.Equal(p.net.fetched, want) {
		t.Fatalf("fetched from %v, want %v (the copies first)", p.net.fetched, want)
	}
}

func TestARestoreWhoseSnapshotNoNodeHoldsIsNotFoundAndOneWhosePeerIsAwayIsUnavailable(t *testing.T) {
	p := newPeerRestore(t)
	_, err := p.restorer.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "r1", Capabilities: rw, SourceSnapshotID: "src@nope"})
	if !errors.Is(err, ports.ErrNotFound) || !strings.Contains(err.Error(), "node-2: not there") || !strings.Contains(err.Error(), "node-3: no such volume") {
		t.Fatalf("err = %v: want NotFound saying what each node answered", err)
	}
	if got := p.net.askedSorted(); !slices.Equal(got, []replica.Node{"node-2", "node-3"}) {
		t.Fatalf("asked %v: want every other node once, never itself", got)
	}
	p.net.Cut("node-2")
	_, err = p.restorer.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "r2", Capabilities: rw, SourceSnapshotID: "src@s1"})
	if !errors.Is(err, ports.ErrUnavailable) || errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("err = %v: want Unavailable while the node that may hold it does not answer", err)
	}
	for _, id := range []volume.ID{"r1", "r2"} {
		if _, err := p.n1.GetVolume(ctx, id); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("a failed restore left volume %s: %v", id, err)
		}
	}
	p.net.Heal("node-2")
	if _, err := p.restorer.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "r2", Capabilities: rw, SourceSnapshotID: "src@s1"}); err != nil {
		t.Fatalf("once the peer answers again: %v", err)
	}
}

func TestARestoreFromAPeerTooLargeForTheRequestIsRefusedBeforeAnyTransfer(t *testing.T) {
	p := newPeerRestore(t)
	write(t, filepath.Join(p.srcPath, "big"), strings.Repeat("x", 3<<20))
	if _, err := p.n2.CreateSnapshot(ctx, "src", volume.SnapshotRef{Volume: "src", Name: "s2"}.StoreName(), nil); err != nil {
		t.Fatal(err)
	}
	p.net.BreakStreams("node-2", 0) // any stream would fail: none is asked
	_, err := p.restorer.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "small", Capacity: volume.CapacityRange{RequiredBytes: volume.MiB, LimitBytes: volume.MiB}, Capabilities: rw, SourceSnapshotID: "src@s2"})
	if !errors.Is(err, volume.ErrOutOfRange) {
		t.Fatalf("err = %v, want OutOfRange", err)
	}
}

// Without WithPeers a restore stays on the node holding its snapshot.
func TestWithoutPeersARestoreOfAnotherNodesSnapshotIsNotFound(t *testing.T) {
	p := newPeerRestore(t)
	alone := provision.New(cfg, p.n1, noMounts{}, zap.NewNop())
	if _, err := alone.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "r", Capabilities: rw, SourceSnapshotID: "src@s1"}); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("err = %v, want NotFound", err)
	}
	if len(p.net.asked) != 0 {
		t.Fatalf("asked %v", p.net.asked)
	}
}

// gatedFetch holds each Fetch until released, as a long transfer does.
type gatedFetch struct {
	*askLog
	started chan struct{}
	release chan struct{}
	lieGUID bool // list the snapshot with another GUID than it has
}

func (g *gatedFetch) CSISnapshots(ctx context.Context, node replica.Node, id volume.ID) ([]ports.SnapshotInfo, error) {
	list, err := g.askLog.CSISnapshots(ctx, node, id)
	if g.lieGUID {
		for i := range list {
			list[i].GUID++
		}
	}
	return list, err
}

func (g *gatedFetch) Fetch(ctx context.Context, node replica.Node, req ports.SendRequest) (io.ReadCloser, error) {
	if g.started != nil {
		close(g.started)
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.askLog.Fetch(ctx, node, req)
}

// A restore longer than the provisioner's call goes on after the call gave
// up: a retry meanwhile is told to wait (not a second transfer from
// zero), and the one after it finds the volume.
func TestARestoreFromAPeerOutlivesTheCallThatStartedIt(t *testing.T) {
	p := newPeerRestore(t)
	g := &gatedFetch{askLog: p.net, started: make(chan struct{}), release: make(chan struct{})}
	c := provision.New(cfg, p.n1, noMounts{}, zap.NewNop(), provision.WithPeers(provision.Peers{Transport: g, Nodes: leases{"node-2"}}))
	req := provision.CreateVolumeRequest{Name: "restored", Capabilities: rw, SourceSnapshotID: "src@s1"}
	callCtx, cancel := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() { _, err := c.CreateVolume(callCtx, req); first <- err }()
	<-g.started
	cancel() // the provisioner's timeout
	if _, err := c.CreateVolume(ctx, req); !errors.Is(err, refusal.ErrPending) {
		t.Fatalf("a retry during the transfer: %v, want ErrPending (Aborted)", err)
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatalf("the transfer, once its call gave up: %v", err)
	}
	if v, err := c.CreateVolume(ctx, req); err != nil || v.ID != "restored" {
		t.Fatalf("the retry after the transfer: %+v, %v", v, err)
	}
	if len(p.net.fetched) != 1 {
		t.Fatalf("fetched %d times, want once", len(p.net.fetched))
	}
}

// A snapshot made again under the same name between the listing and the
// fetch (or a peer that sends another) is not taken for the one listed.
func TestARestoreRefusesAStreamOfAnotherSnapshotThanTheOneListed(t *testing.T) {
	p := newPeerRestore(t)
	g := &gatedFetch{askLog: p.net, lieGUID: true}
	c := provision.New(cfg, p.n1, noMounts{}, zap.NewNop(), provision.WithPeers(provision.Peers{Transport: g, Nodes: leases{"node-2"}}))
	_, err := c.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "restored", Capabilities: rw, SourceSnapshotID: "src@s1"})
	if !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if _, err := p.n1.GetVolume(ctx, "restored"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the refused stream's volume is left: %v", err)
	}
}

// A clone scheduled to a node without a copy of its replicated source is
// made of the newest snapshot of the copy holding it, fetched whole over
// the peer stream: the source as of that snapshot, nothing written after
// it, nothing written on the peer.
func TestACloneOnANodeWithoutACopyOfItsSourceIsFetchedFromTheNewestCopy(t *testing.T) {
	p := newPeerRestore(t)
	taken, err := p.n2.CreateSnapshot(ctx, "src", replica.SnapshotName(replica.Snap{Number: 4, Epoch: 2}), nil)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(p.srcPath, "later"), "written after the replication snapshot")
	if _, err := p.states.Create(ctx, replica.State{Volume: "src", ReplicationFactor: 2, Epoch: 2, Primary: "node-2", CapacityBytes: volume.MiB,
		Replicas: []replica.Replica{{Node: "node-2", Active: true, Snapshot: 4, SnapshotEpoch: 2, SnapshotGUID: taken.GUID}, {Node: "node-3"}}}); err != nil {
		t.Fatal(err)
	}
	before, _ := p.n2.ListSnapshots(ctx, "src")
	v, err := p.restorer.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "clone", Capabilities: rw, SourceVolumeID: "src",
		Parameters: map[string]string{"compression": "on"}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Node != "node-1" || v.SourceVolumeID != "src" || v.CapacityBytes < volume.MiB {
		t.Fatalf("clone %+v: want it on node-1, of the source's 1 MiB at least, from src", v)
	}
	if want := []replica.Node{"node-2"}; !slices.Equal(p.net.fetched, want) {
		t.Fatalf("fetched from %v, want %v (the copy holding the newest snapshot)", p.net.fetched, want)
	}
	info, err := p.n1.GetVolume(ctx, "clone")
	if err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"before": "in the snapshot", "after": "not in the snapshot"} {
		if b, err := os.ReadFile(filepath.Join(info.MountPath, f)); err != nil || string(b) != want {
			t.Fatalf("clone's %s: %q, %v; want %q", f, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(info.MountPath, "later")); !os.IsNotExist(err) {
		t.Fatalf("a file written after the replication snapshot is in the clone: %v", err)
	}
	if info.Properties["compression"] != "on" || info.Metadata[ports.MetaName] != "clone" {
		t.Fatalf("clone %+v: want the class's properties and its name", info)
	}
	if snaps, _ := p.n1.ListSnapshots(ctx, "clone"); len(snaps) != 0 {
		t.Fatalf("the clone keeps snapshots %v", snaps)
	}
	if after, _ := p.n2.ListSnapshots(ctx, "src"); len(after) != len(before) {
		t.Fatalf("the peer's snapshots changed from %v to %v: a clone writes nothing there", before, after)
	}
	// A source with no other copy stays not found here.
	if _, err := p.restorer.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "clone2", Capabilities: rw, SourceVolumeID: "elsewhere"}); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a clone of a volume with no copy anywhere known: %v, want not found", err)
	}
}

// The copy holding the newest snapshot first does not answer: the clone
// comes from another copy holding the very same snapshot. Then, the
// snapshot pruned from every copy (a newer one taken since the state was
// read): Unavailable, retried on the state as it is then.
func TestACloneFallsBackToAnotherCopyOfTheSameSnapshotAndWaitsForAPrunedOne(t *testing.T) {
	p := newPeerRestore(t)
	name := replica.SnapshotName(replica.Snap{Number: 4, Epoch: 2})
	taken, err := p.n2.CreateSnapshot(ctx, "src", name, nil)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := p.n2.Send(ctx, ports.SendRequest{Volume: "src", To: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.n3.Receive(ctx, "src", stream); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	if _, err := p.states.Create(ctx, replica.State{Volume: "src", ReplicationFactor: 2, Epoch: 2, Primary: "node-2", CapacityBytes: volume.MiB,
		Replicas: []replica.Replica{
			{Node: "node-2", Active: true, Snapshot: 4, SnapshotEpoch: 2, SnapshotGUID: taken.GUID},
			{Node: "node-3", Snapshot: 4, SnapshotEpoch: 2, SnapshotGUID: taken.GUID}}}); err != nil {
		t.Fatal(err)
	}
	p.net.Cut("node-2")
	if _, err := p.restorer.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "clone", Capabilities: rw, SourceVolumeID: "src"}); err != nil {
		t.Fatal(err)
	}
	if want := []replica.Node{"node-3"}; !slices.Equal(p.net.fetched, want) {
		t.Fatalf("fetched from %v, want %v (node-2 cut off)", p.net.fetched, want)
	}
	info, err := p.n1.GetVolume(ctx, "clone")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(info.MountPath, "before")); err != nil || string(b) != "in the snapshot" {
		t.Fatalf("clone's file: %q, %v", b, err)
	}
	p.net.Heal("node-2")
	for _, s := range []*memstore.Store{p.n2, p.n3} {
		if err := s.DestroySnapshot(ctx, "src", name); err != nil {
			t.Fatal(err)
		}
	}
	_, err = p.restorer.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "clone2", Capabilities: rw, SourceVolumeID: "src"})
	if !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("a clone of a snapshot pruned everywhere: %v, want unavailable (retried)", err)
	}
	if _, err := p.n1.GetVolume(ctx, "clone2"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a failed clone left a volume: %v", err)
	}
}
