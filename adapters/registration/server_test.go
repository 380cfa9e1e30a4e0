package registration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	regv1 "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func TestTheKubeletLearnsThePluginAndItsEndpointAndStopDeregisters(t *testing.T) {
	dir := t.TempDir()
	// A stale socket file from a crash is replaced.
	stale := filepath.Join(dir, "ferry.zfs.csi.io-reg.sock")
	s, err := New(Config{Driver: "ferry.zfs.csi.io", Dir: dir, Endpoint: "/var/lib/kubelet/plugins/ferry.zfs.csi.io/csi.sock"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the socket is still there after Stop: %v", err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	conn, err := grpc.NewClient("unix://"+s.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := regv1.NewRegistrationClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // the kubelet's deadline
	defer cancel()
	info, err := c.GetInfo(ctx, &regv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != regv1.CSIPlugin || info.Name != "ferry.zfs.csi.io" || info.Endpoint != "/var/lib/kubelet/plugins/ferry.zfs.csi.io/csi.sock" ||
		len(info.SupportedVersions) != 1 || info.SupportedVersions[0] != "1.0.0" {
		t.Fatalf("GetInfo = %+v", info)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &regv1.RegistrationStatus{PluginRegistered: false, Error: "NodeGetInfo failed"}); err != nil {
		t.Fatal(err)
	}
	if ok, why := s.Registered(); ok || why != "NodeGetInfo failed" {
		t.Fatalf("after a refusal: %v %q", ok, why)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &regv1.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Registered(); !ok {
		t.Fatal("not registered after the kubelet said so")
	}
}

func TestStartRefusesToReplaceAnythingButASocket(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{Driver: "ferry.zfs.csi.io", Dir: dir, Endpoint: "/csi.sock"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.SocketPath(), []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		s.Stop()
		t.Fatal("a regular file at the socket path was replaced")
	}
	if b, _ := os.ReadFile(s.SocketPath()); string(b) != "keep me" {
		t.Fatal("the file was changed")
	}
	for _, bad := range []Config{{Driver: "a/b", Dir: dir, Endpoint: "/x"}, {Driver: "d", Dir: "rel", Endpoint: "/x"}, {Driver: "d", Dir: dir, Endpoint: "x"}} {
		if _, err := New(bad, zap.NewNop()); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}
