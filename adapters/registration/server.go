// Package registration registers the CSI node plugin with the kubelet
// through the kubelet's plugin registration API (pluginregistration v1):
// a small gRPC service on a socket in the kubelet's plugins_registry
// directory. The kubelet finds the socket, asks GetInfo (within 1 s), then
// calls NodeGetInfo on the CSI endpoint it was given, and reports the
// outcome with NotifyRegistrationStatus. Removing the socket deregisters.
// It replaces the node-driver-registrar sidecar.
package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	regv1 "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Config says what to register and where.
type Config struct {
	// Driver is the CSI driver name.
	Driver string
	// Dir is the kubelet's plugins_registry directory.
	Dir string
	// Endpoint is the CSI socket's path as the kubelet (the host) sees it.
	Endpoint string
}

// Server answers the kubelet's registration calls.
type Server struct {
	regv1.UnimplementedRegistrationServer
	cfg Config
	log *zap.Logger

	mu         sync.Mutex
	registered bool
	lastError  string
	srv        *grpc.Server
	socket     string
}

// New returns a registration server for cfg.
func New(cfg Config, log *zap.Logger) (*Server, error) {
	if cfg.Driver == "" || strings.ContainsAny(cfg.Driver, "/\x00") {
		return nil, fmt.Errorf("registration: bad driver name %q", cfg.Driver)
	}
	if !filepath.IsAbs(cfg.Endpoint) || !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("registration: the registry directory %q and the endpoint %q must be absolute paths", cfg.Dir, cfg.Endpoint)
	}
	return &Server{cfg: cfg, log: log}, nil
}

// SocketPath is where the kubelet looks for the registration socket (a
// name starting with "." would be ignored).
func (s *Server) SocketPath() string {
	return filepath.Join(s.cfg.Dir, s.cfg.Driver+"-reg.sock")
}

// GetInfo tells the kubelet which plugin this is and where its CSI
// endpoint is.
func (s *Server) GetInfo(ctx context.Context, _ *regv1.InfoRequest) (*regv1.PluginInfo, error) {
	return &regv1.PluginInfo{
		Type:              regv1.CSIPlugin,
		Name:              s.cfg.Driver,
		Endpoint:          s.cfg.Endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

// NotifyRegistrationStatus records the kubelet's verdict.
func (s *Server) NotifyRegistrationStatus(ctx context.Context, st *regv1.RegistrationStatus) (*regv1.RegistrationStatusResponse, error) {
	s.mu.Lock()
	s.registered, s.lastError = st.PluginRegistered, st.Error
	s.mu.Unlock()
	if st.PluginRegistered {
		s.log.Info("registered with the kubelet", zap.String("endpoint", s.cfg.Endpoint))
	} else {
		s.log.Error("the kubelet refused the registration", zap.String("error", st.Error))
	}
	return &regv1.RegistrationStatusResponse{}, nil
}

// Registered reports the kubelet's last verdict and its error.
func (s *Server) Registered() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registered, s.lastError
}

// Start listens on the registration socket (replacing a stale one left by
// a crash, never anything but a socket) and serves in the background.
func (s *Server) Start() error {
	path := s.SocketPath()
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("registration: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("registration: removing a stale socket: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("registration: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("registration: %w", err)
	}
	// The socket is removed by Stop, never by the listener's Close: a
	// server stopped before its Serve began closes the listener later, and
	// would otherwise unlink the socket of the next Start.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := grpc.NewServer()
	regv1.RegisterRegistrationServer(srv, s)
	s.mu.Lock()
	s.srv, s.socket = srv, path
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	s.log.Info("registration socket ready", zap.String("socket", path), zap.String("endpoint", s.cfg.Endpoint))
	return nil
}

// Stop stops serving and removes the socket: the kubelet deregisters the
// plugin.
func (s *Server) Stop() {
	s.mu.Lock()
	srv, path := s.srv, s.socket
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	_ = os.Remove(path)
}
