package csi_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ferry-csi/ferry/adapters/csi"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

const (
	driverName    = "ferry.zfs.csi.io"
	driverVersion = "v0.0.0-test"
	nodeName      = "node-1"
	poolName      = "ferry"
	poolBytes     = 10 << 30
)

// env is one driver (identity, controller and node services) served over a
// real gRPC connection, on an in-memory store whose volumes are directories
// under dir.
type env struct {
	dir   string
	mem   *memstore.Store
	mount *fakeMounter
	ctrl  spec.ControllerClient
	node  spec.NodeClient
	ident spec.IdentityClient
	// ctrlUC is the controller use case behind ctrl.
	ctrlUC *provision.Service
}

// newEnv serves a fresh driver. wrap, when given, wraps the memstore in the
// store the use cases see (to make a store call block, for instance).
func newEnv(t *testing.T, wrap ...func(*memstore.Store) ports.SnapshotStore) *env {
	t.Helper()
	dir := t.TempDir()
	mem := memstore.New(dir, poolBytes, 1)
	var store ports.SnapshotStore = mem
	for _, w := range wrap {
		store = w(mem)
	}
	mounter := newFakeMounter()
	cfg := publish.Config{Node: nodeName}
	log := zap.NewNop()
	id := &csi.Identity{Name: driverName, Version: driverVersion,
		Ready: func(ctx context.Context) error { _, err := store.Capacity(ctx); return err }}
	ctrlUC := provision.New(provision.Config{Node: nodeName, Pool: poolName}, store, mounter, log)
	ctrl := &csi.Controller{UC: ctrlUC}
	node := &csi.Node{UC: publish.New(cfg, store, mounter, log)}
	conn := serve(t, csi.NewServer(log, id, ctrl, node))
	return &env{
		dir: dir, mem: mem, mount: mounter, ctrlUC: ctrlUC,
		ctrl:  spec.NewControllerClient(conn),
		node:  spec.NewNodeClient(conn),
		ident: spec.NewIdentityClient(conn),
	}
}

// serve runs srv on an in-memory listener and dials it; both are stopped
// when the test ends.
func serve(t *testing.T, srv *csi.Server) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///ferry",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
		<-served
	})
	return conn
}

// ctx is a per-call context bounded well below the test binary's timeout.
func ctx(t *testing.T) context.Context {
	// Stretched in the OpenZFS lane's emulated guest, where a destroy
	// waits for its transaction group at a fraction of the host's speed.
	c, cancel := context.WithTimeout(t.Context(), 20*time.Second*zfstest.TimeScale())
	t.Cleanup(cancel)
	return c
}

// wantCode fails the test unless err carries exactly the gRPC code want.
func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("code = %v, want %v (error: %v)", got, want, err)
	}
}

// mountCap is a filesystem capability in the given access mode.
func mountCap(mode spec.VolumeCapability_AccessMode_Mode) *spec.VolumeCapability {
	return &spec.VolumeCapability{
		AccessType: &spec.VolumeCapability_Mount{Mount: &spec.VolumeCapability_MountVolume{}},
		AccessMode: &spec.VolumeCapability_AccessMode{Mode: mode},
	}
}

func rwCap() *spec.VolumeCapability {
	return mountCap(spec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
}

func blockCap() *spec.VolumeCapability {
	return &spec.VolumeCapability{
		AccessType: &spec.VolumeCapability_Block{Block: &spec.VolumeCapability_BlockVolume{}},
		AccessMode: &spec.VolumeCapability_AccessMode{Mode: spec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// createReq is a plain CreateVolume request for name with required bytes
// (0: none).
func createReq(name string, required int64) *spec.CreateVolumeRequest {
	r := &spec.CreateVolumeRequest{Name: name, VolumeCapabilities: []*spec.VolumeCapability{rwCap()}}
	if required > 0 {
		r.CapacityRange = &spec.CapacityRange{RequiredBytes: required}
	}
	return r
}

// mustCreate creates a volume and returns it.
func (e *env) mustCreate(t *testing.T, req *spec.CreateVolumeRequest) *spec.Volume {
	t.Helper()
	resp, err := e.ctrl.CreateVolume(ctx(t), req)
	if err != nil {
		t.Fatalf("CreateVolume(%q): %v", req.GetName(), err)
	}
	return resp.GetVolume()
}

func (e *env) mustSnapshot(t *testing.T, name, source string) *spec.Snapshot {
	t.Helper()
	resp, err := e.ctrl.CreateSnapshot(ctx(t), &spec.CreateSnapshotRequest{Name: name, SourceVolumeId: source})
	if err != nil {
		t.Fatalf("CreateSnapshot(%q of %q): %v", name, source, err)
	}
	return resp.GetSnapshot()
}

// volumeIDs lists every volume through ListVolumes.
func (e *env) volumeIDs(t *testing.T) []string {
	t.Helper()
	resp, err := e.ctrl.ListVolumes(ctx(t), &spec.ListVolumesRequest{})
	if err != nil {
		t.Fatalf("ListVolumes: %v", err)
	}
	var ids []string
	for _, en := range resp.GetEntries() {
		ids = append(ids, en.GetVolume().GetVolumeId())
	}
	return ids
}

// snapshotIDs lists every snapshot through ListSnapshots.
func (e *env) snapshotIDs(t *testing.T) []string {
	t.Helper()
	resp, err := e.ctrl.ListSnapshots(ctx(t), &spec.ListSnapshotsRequest{})
	if err != nil {
		t.Fatalf("ListSnapshots: %v", err)
	}
	var ids []string
	for _, en := range resp.GetEntries() {
		ids = append(ids, en.GetSnapshot().GetSnapshotId())
	}
	return ids
}

// storeEntries lists what the store holds on disk.
func (e *env) storeEntries(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(e.dir)
	if err != nil {
		t.Fatalf("read store dir: %v", err)
	}
	var names []string
	for _, en := range ents {
		names = append(names, en.Name())
	}
	return names
}

// assertNothingCreated checks that neither the API nor the disk shows a volume.
func (e *env) assertNothingCreated(t *testing.T) {
	t.Helper()
	if ids := e.volumeIDs(t); len(ids) != 0 {
		t.Fatalf("ListVolumes = %q, want none", ids)
	}
	if names := e.storeEntries(t); len(names) != 0 {
		t.Fatalf("store directory holds %q, want nothing", names)
	}
}

// writeFile writes a file into a volume's directory (<dir>/<volume id>).
func (e *env) writeFile(t *testing.T, volumeID, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, volumeID, name), []byte(content), 0o644); err != nil {
		t.Fatalf("write %s in %s: %v", name, volumeID, err)
	}
}

func (e *env) readFile(t *testing.T, volumeID, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, volumeID, name))
	if err != nil {
		t.Fatalf("read %s in %s: %v", name, volumeID, err)
	}
	return string(b)
}

// fakeMounter records bind mounts by target. Memstore's MountSource is its
// MountPath, so recording the bind source is what a mount table would show.
type fakeMounter struct {
	mu     sync.Mutex
	mounts map[string]ports.Mount
	binds  int // BindMount calls that mounted something
	// onBind, when set, runs at the start of every BindMount, outside mu.
	onBind func()
}

var _ ports.Mounter = (*fakeMounter)(nil)

// fakeStats is what the fake reports for every published path.
var fakeStats = ports.FsStats{
	TotalBytes: volume.GiB, AvailableBytes: 768 * volume.MiB, UsedBytes: 256 * volume.MiB,
	TotalInodes: 1000, FreeInodes: 900, UsedInodes: 100,
}

func newFakeMounter() *fakeMounter { return &fakeMounter{mounts: map[string]ports.Mount{}} }

func (f *fakeMounter) BindMount(ctx context.Context, source string, t volume.Target, readOnly bool) error {
	target := t.Path()
	f.mu.Lock()
	hook := f.onBind
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.mounts[target]; ok && m.Source == source && m.ReadOnly == readOnly {
		return nil
	}
	f.mounts[target] = ports.Mount{Source: source, ReadOnly: readOnly}
	f.binds++
	return nil
}

// setOnBind installs (or, with nil, removes) the BindMount hook.
func (f *fakeMounter) setOnBind(hook func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onBind = hook
}

func (f *fakeMounter) Unmount(ctx context.Context, t volume.Target) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.mounts, t.Path())
	return nil
}

// RemoveDir: the fake creates no directories, so there is none to remove.
func (f *fakeMounter) RemoveDir(t volume.Target) (bool, error) { return false, nil }

func (f *fakeMounter) MountsOf(source string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for target, m := range f.mounts {
		if m.Source == source {
			out = append(out, target)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (f *fakeMounter) MountAt(target string) (ports.Mount, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.mounts[target]
	return m, ok, nil
}

func (f *fakeMounter) Stats(path string) (ports.FsStats, error) { return fakeStats, nil }

// snapshot returns a copy of the mount table and the bind count.
func (f *fakeMounter) snapshot() (map[string]ports.Mount, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]ports.Mount, len(f.mounts))
	for k, v := range f.mounts {
		out[k] = v
	}
	return out, f.binds
}

// blockingStore makes CreateVolume of one volume wait until released, so
// that the use case's per-volume lock is held for as long as a test needs.
type blockingStore struct {
	*memstore.Store
	id       volume.ID
	once     sync.Once
	entered  chan struct{}
	released chan struct{}
}

func newBlockingStore(id volume.ID) (*blockingStore, func(*memstore.Store) ports.SnapshotStore) {
	b := &blockingStore{id: id, entered: make(chan struct{}), released: make(chan struct{})}
	return b, func(m *memstore.Store) ports.SnapshotStore { b.Store = m; return b }
}

func (b *blockingStore) CreateVolume(ctx context.Context, id volume.ID, opts ports.CreateOptions) (ports.VolumeInfo, error) {
	if id == b.id {
		b.once.Do(func() { close(b.entered) })
		select {
		case <-b.released:
		case <-ctx.Done():
			return ports.VolumeInfo{}, ctx.Err()
		}
	}
	return b.Store.CreateVolume(ctx, id, opts)
}

// short trims s for test names and messages.
func short(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > 24 {
		return s[:24] + "..."
	}
	return s
}
