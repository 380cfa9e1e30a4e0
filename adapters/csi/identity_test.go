package csi_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferry-csi/ferry/adapters/csi"
)

func TestGetPluginInfoNamesTheDriverAndItsVersion(t *testing.T) {
	e := newEnv(t)
	resp, err := e.ident.GetPluginInfo(ctx(t), &spec.GetPluginInfoRequest{})
	wantCode(t, err, codes.OK)
	if resp.GetName() != driverName || resp.GetVendorVersion() != driverVersion {
		t.Fatalf("GetPluginInfo = %q %q, want %q %q", resp.GetName(), resp.GetVendorVersion(), driverName, driverVersion)
	}
}

func TestProbeIsReadyWhenTheStoreAnswers(t *testing.T) {
	e := newEnv(t)
	resp, err := e.ident.Probe(ctx(t), &spec.ProbeRequest{})
	wantCode(t, err, codes.OK)
	if resp.GetReady() == nil || !resp.GetReady().GetValue() {
		t.Fatalf("Probe ready = %v, want true", resp.GetReady())
	}
}

func TestProbeIsNotReadyWhenTheStoreFails(t *testing.T) {
	id := &csi.Identity{Name: driverName, Version: driverVersion, Ready: func(context.Context) error { return errors.New("pool gone") }}
	conn := serve(t, csi.NewServer(zap.NewNop(), id, nil, nil))
	resp, err := spec.NewIdentityClient(conn).Probe(ctx(t), &spec.ProbeRequest{})
	wantCode(t, err, codes.OK)
	if resp.GetReady() == nil || resp.GetReady().GetValue() {
		t.Fatalf("Probe ready = %v, want false", resp.GetReady())
	}
	// Services not given are not served.
	_, err = spec.NewControllerClient(conn).ControllerGetCapabilities(ctx(t), &spec.ControllerGetCapabilitiesRequest{})
	wantCode(t, err, codes.Unimplemented)
}

func TestCapabilitiesAdvertiseWhatTheDriverImplements(t *testing.T) {
	e := newEnv(t)
	plugin, err := e.ident.GetPluginCapabilities(ctx(t), &spec.GetPluginCapabilitiesRequest{})
	wantCode(t, err, codes.OK)
	var controller, topology, online bool
	for _, c := range plugin.GetCapabilities() {
		switch {
		case c.GetService().GetType() == spec.PluginCapability_Service_CONTROLLER_SERVICE:
			controller = true
		case c.GetService().GetType() == spec.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS:
			topology = true
		case c.GetVolumeExpansion().GetType() == spec.PluginCapability_VolumeExpansion_ONLINE:
			online = true
		}
	}
	if !controller || !topology || !online {
		t.Fatalf("plugin capabilities = %v", plugin.GetCapabilities())
	}
	ctrl, err := e.ctrl.ControllerGetCapabilities(ctx(t), &spec.ControllerGetCapabilitiesRequest{})
	wantCode(t, err, codes.OK)
	got := map[spec.ControllerServiceCapability_RPC_Type]bool{}
	for _, c := range ctrl.GetCapabilities() {
		got[c.GetRpc().GetType()] = true
	}
	for _, want := range []spec.ControllerServiceCapability_RPC_Type{
		spec.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, spec.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		spec.ControllerServiceCapability_RPC_LIST_VOLUMES, spec.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		spec.ControllerServiceCapability_RPC_EXPAND_VOLUME, spec.ControllerServiceCapability_RPC_CLONE_VOLUME,
		spec.ControllerServiceCapability_RPC_GET_CAPACITY,
	} {
		if !got[want] {
			t.Errorf("controller capability %v is not advertised", want)
		}
	}
	node, err := e.node.NodeGetCapabilities(ctx(t), &spec.NodeGetCapabilitiesRequest{})
	wantCode(t, err, codes.OK)
	if len(node.GetCapabilities()) == 0 {
		t.Fatal("no node capabilities")
	}
}

func TestSocketPathAcceptsAbsoluteUnixEndpointsOnly(t *testing.T) {
	cases := []struct {
		endpoint, want string
		ok             bool
	}{
		{"unix:///csi/csi.sock", "/csi/csi.sock", true},
		{"unix:/csi/csi.sock", "/csi/csi.sock", true},
		{"/csi/csi.sock", "/csi/csi.sock", true},
		{"tcp://127.0.0.1:10000", "", false},
		{"unix://csi.sock", "", false},
		{"csi.sock", "", false},
	}
	for _, c := range cases {
		got, err := csi.SocketPath(c.endpoint)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("SocketPath(%q) = %q, %v; want %q, ok %v", c.endpoint, got, err, c.want, c.ok)
		}
	}
}

func TestTheServerServesOnUnixSocketsReplacingAStaleOneAndRemovesThemOnStop(t *testing.T) {
	// Unix socket paths are limited to 108 bytes: t.TempDir() may be longer.
	dir, err := os.MkdirTemp("", "ferry")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "plugin", "csi.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sock, nil, 0o600); err != nil { // stale
		t.Fatal(err)
	}
	// The kubelet's socket and the pod's own sidecars' (--csi-sidecar-endpoint).
	sidecars := filepath.Join(dir, "sidecars", "csi.sock")
	srv := csi.NewServer(zap.NewNop(), &csi.Identity{Name: driverName, Version: driverVersion}, nil, nil)
	served := make(chan error, 2)
	for _, p := range []string{sock, sidecars} {
		l, err := srv.Listen("unix://" + p)
		if err != nil {
			t.Fatalf("Listen %s: %v", p, err)
		}
		go func() { served <- srv.Serve(l) }()
	}
	for _, p := range []string{sock, sidecars} {
		conn, err := grpc.NewClient("unix://"+p, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", p)
			}))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := spec.NewIdentityClient(conn).GetPluginInfo(ctx(t), &spec.GetPluginInfoRequest{})
		wantCode(t, err, codes.OK)
		if resp.GetName() != driverName {
			t.Fatalf("%s: name = %q", p, resp.GetName())
		}
		_ = conn.Close()
	}
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Stop(stop)
	<-served
	<-served
	for _, p := range []string{sock, sidecars} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the socket %s is left after Stop: %v", p, err)
		}
	}
}
