package csi_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/ferry-csi/ferry/adapters/csi"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/publish"
)

// Every call served is told to the observer with its method and code: a
// success as OK, a refusal with its code.
func TestTheCallObserverHearsEveryCallWithItsCode(t *testing.T) {
	var mu sync.Mutex
	var got []string
	observe := func(method string, code codes.Code, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, method+" "+code.String())
	}
	store := memstore.New(t.TempDir(), poolBytes, 1)
	log := zap.NewNop()
	id := &csi.Identity{Name: driverName, Version: driverVersion}
	node := &csi.Node{UC: publish.New(publish.Config{Node: nodeName}, store, newFakeMounter(), log)}
	conn := serve(t, csi.NewServer(log, id, nil, node, csi.WithCallObserver(observe)))
	ctx := context.Background()
	if _, err := spec.NewIdentityClient(conn).Probe(ctx, &spec.ProbeRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := spec.NewNodeClient(conn).NodePublishVolume(ctx, &spec.NodePublishVolumeRequest{}); err == nil {
		t.Fatal("a publish of no volume succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"/csi.v1.Identity/Probe OK", "/csi.v1.Node/NodePublishVolume InvalidArgument"}
	if !slices.Equal(got, want) {
		t.Errorf("observed %v, want %v", got, want)
	}
}
