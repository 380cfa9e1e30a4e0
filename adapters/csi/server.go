package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server is a gRPC server on unix sockets serving the given CSI services.
type Server struct {
	grpc  *grpc.Server
	paths []string // the sockets Listen bound, removed by Stop
	log   *zap.Logger
	// observe, when set, hears every call's method, code and duration
	// (WithCallObserver).
	observe func(method string, code codes.Code, took time.Duration)
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithCallObserver has f hear every call served: its full gRPC method,
// its code (OK for a success) and how long it took (metrics).
func WithCallObserver(f func(method string, code codes.Code, took time.Duration)) ServerOption {
	return func(s *Server) { s.observe = f }
}

// SocketPath accepts "unix:///path", "unix:/path" or a plain path.
func SocketPath(endpoint string) (string, error) {
	p := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		p = rest
	} else if rest, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		p = rest
	} else if strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("endpoint %q: only unix sockets are served", endpoint)
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("endpoint %q: socket path must be absolute", endpoint)
	}
	return p, nil
}

// NewServer registers the services that are not nil.
func NewServer(log *zap.Logger, id *Identity, ctrl *Controller, node *Node, opts ...ServerOption) *Server {
	s := &Server{log: log}
	for _, o := range opts {
		o(s)
	}
	s.grpc = grpc.NewServer(grpc.UnaryInterceptor(s.logCalls))
	csi.RegisterIdentityServer(s.grpc, id)
	if ctrl != nil {
		csi.RegisterControllerServer(s.grpc, ctrl)
	}
	if node != nil {
		csi.RegisterNodeServer(s.grpc, node)
	}
	return s
}

// Listen binds the socket, replacing a stale one left by a previous run.
// It may be called for several sockets (the kubelet's, the pod's own
// sidecars'), each served by Serve.
func (s *Server) Listen(endpoint string) (net.Listener, error) {
	p, err := SocketPath(endpoint)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", p, err)
	}
	l, err := net.Listen("unix", p)
	if err != nil {
		return nil, err
	}
	s.paths = append(s.paths, p)
	return l, nil
}

// Serve serves until Stop.
func (s *Server) Serve(l net.Listener) error { return s.grpc.Serve(l) }

// Stop lets calls in flight finish, up to ctx's deadline, then cuts them.
func (s *Server) Stop(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
	}
	for _, p := range s.paths {
		_ = os.Remove(p)
	}
}

// logCalls logs every call with its outcome. Requests are logged by method
// and their identifying fields only: CSI secrets never reach the log.
func (s *Server) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	took := time.Since(start)
	if s.observe != nil {
		s.observe(info.FullMethod, status.Code(err), took)
	}
	fields := append(requestFields(req), zap.String("method", info.FullMethod), zap.Duration("took", took))
	if err != nil {
		st, _ := status.FromError(err)
		s.log.Info("csi call failed", append(fields, zap.String("code", st.Code().String()), zap.String("error", st.Message()))...)
	} else {
		s.log.Debug("csi call", fields...)
	}
	return resp, err
}

// requestFields picks the identifying fields of a request.
func requestFields(req any) []zap.Field {
	var f []zap.Field
	if r, ok := req.(interface{ GetVolumeId() string }); ok && r.GetVolumeId() != "" {
		f = append(f, zap.String("volume", trim(r.GetVolumeId())))
	}
	if r, ok := req.(interface{ GetName() string }); ok && r.GetName() != "" {
		f = append(f, zap.String("name", trim(r.GetName())))
	}
	if r, ok := req.(interface{ GetSnapshotId() string }); ok && r.GetSnapshotId() != "" {
		f = append(f, zap.String("snapshot", trim(r.GetSnapshotId())))
	}
	if r, ok := req.(interface{ GetTargetPath() string }); ok && r.GetTargetPath() != "" {
		f = append(f, zap.String("target", trim(r.GetTargetPath())))
	}
	return f
}

func trim(s string) string {
	if len(s) > 128 {
		return s[:128] + "..."
	}
	return s
}
