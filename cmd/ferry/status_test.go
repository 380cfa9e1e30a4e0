package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/eventlog"
	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/faketransport"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

func TestTheStatusEndpointReportsTheReplicaAndTakesSnapshotRequests(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(t.TempDir(), 1<<30, 1)
	if _, err := store.CreateVolume(ctx, "v", ports.CreateOptions{CapacityBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	state := fakecluster.New()
	if _, err := state.Create(ctx, replica.State{Volume: "v", ReplicationFactor: 1, Epoch: 1, Primary: "n1",
		Replicas: []replica.Replica{{Node: "n1", Active: true}}}); err != nil {
		t.Fatal(err)
	}
	r := replication.New(replication.Config{Node: "n1", Volume: "v", Tick: 5 * time.Millisecond, SnapshotInterval: time.Hour, Keep: 2},
		store, state, faketransport.New(), eventlog.Recorder{Log: zap.NewNop()}, zap.NewNop())
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = r.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(statusHandler(r))
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/snapshot", "", nil)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /snapshot = %v, %v", resp, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/status")
		if err != nil {
			t.Fatal(err)
		}
		var s replication.Status
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if s.Snapshot == 1 && s.Primary {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the requested snapshot: %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type fixedStatus replication.Status

func (f *fixedStatus) Status() replication.Status { return replication.Status(*f) }

func TestTheReadinessProbeFollowsTheReplicasReadiness(t *testing.T) {
	st := &fixedStatus{Snapshot: 3, Epoch: 1}
	srv := httptest.NewServer(readyHandler(st))
	defer srv.Close()
	get := func() int {
		resp, err := http.Get(srv.URL + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	cases := []struct {
		name string
		st   fixedStatus
		want int
	}{
		{"behind", fixedStatus{Snapshot: 3, Epoch: 1}, http.StatusServiceUnavailable},
		{"up to date", fixedStatus{Snapshot: 9, Epoch: 1, Ready: true}, http.StatusOK},
		{"the active primary", fixedStatus{Snapshot: 9, Epoch: 1, Primary: true}, http.StatusOK},
	}
	for _, c := range cases {
		*st = c.st
		if got := get(); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	resp, err := http.Post(srv.URL+"/snapshot", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("the probe endpoint answered a snapshot request with %d", resp.StatusCode)
	}
}
