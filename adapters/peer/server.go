package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Server serves one node's replication snapshots to its peers.
type Server struct {
	store Source
	log   *zap.Logger
	grpc  *grpc.Server
	// speaks: the protocol versions this server answers in.
	speaks versions

	mu       sync.Mutex
	promiser func(replica.Node) (bool, time.Duration)
}

// SetPromiser makes the server answer promise requests with p (the
// daemon's failover Survivor); without one every request is refused.
func (s *Server) SetPromiser(p func(replica.Node) (bool, time.Duration)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.promiser = p
}

// handler is the service's handler type, as grpc.RegisterService wants one.
type handler interface {
	snapshots(ctx context.Context, req *SnapshotsRequest) (*SnapshotsResponse, error)
	promise(ctx context.Context, req *PromiseRequest) (*PromiseResponse, error)
	send(req *SendRequest, stream grpc.ServerStream) error
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*handler)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Snapshots",
		Handler: func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			var req SnapshotsRequest
			if err := dec(&req); err != nil {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
			return intercepted(ctx, in, methodSnapshots, &req, func(ctx context.Context, _ any) (any, error) { return srv.(handler).snapshots(ctx, &req) })
		},
	}, {
		MethodName: "Promise",
		Handler: func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			var req PromiseRequest
			if err := dec(&req); err != nil {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
			return intercepted(ctx, in, methodPromise, &req, func(ctx context.Context, _ any) (any, error) { return srv.(handler).promise(ctx, &req) })
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Send",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			var req SendRequest
			if err := stream.RecvMsg(&req); err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
			return srv.(handler).send(&req, stream)
		},
	}},
}

// intercepted runs a unary handler through the server's interceptors
// (the protocol's negotiation).
func intercepted(ctx context.Context, in grpc.UnaryServerInterceptor, method string, req any, h grpc.UnaryHandler) (any, error) {
	if in == nil {
		return h(ctx, req)
	}
	return in(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, h)
}

// NewServer returns a peer server over store. creds are the server's mutual
// TLS credentials (ServerTLS); nil means plaintext, which only tests and an
// explicit --insecure-peer may ask for.
func NewServer(store Source, creds credentials.TransportCredentials, log *zap.Logger) *Server {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return newServer(store, creds, log, speaks)
}

func newServer(store Source, creds credentials.TransportCredentials, log *zap.Logger, v versions) *Server {
	s := &Server{store: store, log: log, speaks: v}
	opts := append(serverVersioning(v), grpc.Creds(creds), grpc.ForceServerCodecV2(codec{}),
		grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(windowSize),
		grpc.WriteBufferSize(bufferSize), grpc.ReadBufferSize(bufferSize),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true}))
	s.grpc = grpc.NewServer(opts...)
	s.grpc.RegisterService(&serviceDesc, s)
	return s
}

// Serve serves on l until Stop.
func (s *Server) Serve(l net.Listener) error { return s.grpc.Serve(l) }

// Stop ends every stream (their zfs send processes are killed) and stops.
func (s *Server) Stop() { s.grpc.Stop() }

// refuseEncryption answers a send refused for encryption reasons with
// FailedPrecondition and logs it at Error with the volume (no event
// recorder reaches the peer server; the volume is in fields).
func (s *Server) refuseEncryption(ctx context.Context, err error, fields ...zap.Field) error {
	s.log.Error("send refused for encryption reasons", append(fields, zap.String("peer", who(ctx)), zap.Error(err))...)
	return status.Error(codes.FailedPrecondition, err.Error())
}

// refuse logs a refused request with the peer's identity and answers code.
func (s *Server) refuse(ctx context.Context, code codes.Code, err error, fields ...zap.Field) error {
	s.log.Warn("peer request refused", append(fields, zap.String("peer", who(ctx)), zap.String("code", code.String()), zap.Error(err))...)
	return status.Error(code, err.Error())
}

func (s *Server) snapshots(ctx context.Context, req *SnapshotsRequest) (*SnapshotsResponse, error) {
	id, err := volume.ParseID("volume", req.Volume)
	if err != nil {
		return nil, s.refuse(ctx, codes.InvalidArgument, err, zap.String("volume", truncate(req.Volume)))
	}
	if req.CSI {
		if err := nodesOnly(ctx); err != nil {
			return nil, s.refuse(ctx, codes.PermissionDenied, err, zap.String("volume", string(id)))
		}
	}
	list, err := s.store.ListSnapshots(ctx, id)
	if err != nil {
		return nil, s.storeError(ctx, err, zap.String("volume", string(id)))
	}
	resp := &SnapshotsResponse{Snapshots: []Snapshot{}}
	for _, sn := range list {
		if !listed(sn.Name, req.CSI) {
			continue // nothing but the kind asked for crosses the wire
		}
		resp.Snapshots = append(resp.Snapshots, Snapshot{Name: sn.Name, GUID: sn.GUID, CreateTxg: sn.CreateTxg, SizeBytes: sn.SizeBytes, Metadata: sn.Metadata})
	}
	return resp, nil
}

// promise answers a node asking not to be taken over: only for a valid
// node name, only to that node when the caller's certificate names one
// (a promise is what lets a node write on, so no other node may ask one
// for it), and only by a server that observes leases.
func (s *Server) promise(ctx context.Context, req *PromiseRequest) (*PromiseResponse, error) {
	node := replica.Node(req.Node)
	if !nodeName.MatchString(req.Node) || len(req.Node) > 253 {
		return nil, s.refuse(ctx, codes.InvalidArgument, fmt.Errorf("%q is not a node name", truncate(req.Node)), zap.String("node", truncate(req.Node)))
	}
	// A peer whose certificate names no node (the shared one: a node not
	// enrolled yet, a pod of a release before) got here only because
	// node identities are not required (TLSFiles.RequireNode); it is
	// answered as before them.
	if asker, named := NodeOf(ctx); named && asker != node {
		return nil, s.refuse(ctx, codes.PermissionDenied, fmt.Errorf("node %s asked a promise for node %s: only the node itself may ask", asker, node), zap.String("node", string(node)))
	}
	s.mu.Lock()
	p := s.promiser
	s.mu.Unlock()
	if p == nil {
		return &PromiseResponse{Reason: "this node observes no leases"}, nil
	}
	ok, span := p(node)
	if !ok {
		return &PromiseResponse{Reason: "not promised"}, nil
	}
	return &PromiseResponse{Granted: true, Span: int64(span)}, nil
}

func (s *Server) storeError(ctx context.Context, err error, fields ...zap.Field) error {
	switch {
	case errors.Is(err, ports.ErrNotOwned):
		return s.refuse(ctx, codes.PermissionDenied, err, fields...)
	case errors.Is(err, ports.ErrRawUnsupported), errors.Is(err, volume.ErrNotFerrysKey):
		// An encrypted volume asked by a peer too old for raw streams, or
		// encryption Ferry does not manage: not until that changes.
		return s.refuseEncryption(ctx, err, fields...)
	case errors.Is(err, ports.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ports.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// nodesOnly refuses a CSI snapshot (a volume of one copy has no other
// way to leave its node) to a peer whose certificate names no node: the
// shared certificate every volume manager mounts, or no TLS at all. A
// restore asks from a node's daemon, which holds its node's own.
func nodesOnly(ctx context.Context) error {
	if _, named := NodeOf(ctx); !named {
		return errors.New("CSI snapshots are served only to a peer whose certificate names its node")
	}
	return nil
}

// listed: the snapshot is of the kind a listing asked for, replication
// snapshots or (csi) CSI snapshots; nothing else in the dataset is named.
func listed(name string, csi bool) bool {
	if csi {
		return volume.IsSnapshotStoreName(name)
	}
	_, _, ok := replica.ParseSnapshotName(name)
	return ok
}

// validate turns a wire request into a store request, refusing anything
// that is not a Ferry volume ID and replication snapshot names, or a CSI
// snapshot's name asked whole (a restore on another node: no base, no
// resume token).
func validate(req *SendRequest) (ports.SendRequest, error) {
	id, err := volume.ParseID("volume", req.Volume)
	if err != nil {
		return ports.SendRequest{}, err
	}
	out := ports.SendRequest{Volume: id, To: req.To, From: req.From, ResumeToken: req.ResumeToken, Accept: parseFeatures(req.Accept)}
	if !validToken(req.ResumeToken) {
		return out, fmt.Errorf("resume token %q is malformed", truncate(req.ResumeToken))
	}
	if volume.IsSnapshotStoreName(req.To) {
		if req.From != "" || req.ResumeToken != "" {
			return out, fmt.Errorf("CSI snapshot %q is sent whole only: no base snapshot, no resume token", truncate(req.To))
		}
		return out, nil
	}
	if _, _, ok := replica.ParseSnapshotName(req.To); !ok {
		return out, fmt.Errorf("snapshot %q is neither a replication snapshot (ferry-<n>) nor a CSI snapshot (csi-<name>)", truncate(req.To))
	}
	if req.From != "" {
		if _, _, ok := replica.ParseSnapshotName(req.From); !ok {
			return out, fmt.Errorf("base snapshot %q is not a replication snapshot (ferry-<n>)", truncate(req.From))
		}
	}
	return out, nil
}

func (s *Server) send(req *SendRequest, stream grpc.ServerStream) error {
	ctx := stream.Context()
	sreq, err := validate(req)
	if err != nil {
		return s.refuse(ctx, codes.InvalidArgument, err, zap.String("volume", truncate(req.Volume)))
	}
	if volume.IsSnapshotStoreName(sreq.To) {
		if err := nodesOnly(ctx); err != nil {
			return s.refuse(ctx, codes.PermissionDenied, err, zap.String("volume", string(sreq.Volume)))
		}
	}
	// A client of a version before raw streams is served plaintext
	// volumes only: an encrypted one is refused, never sent otherwise.
	sreq.PlaintextOnly = agreed(ctx, s.speaks) < rawStreams
	log := s.log.With(zap.String("volume", string(sreq.Volume)), zap.String("snapshot", sreq.To),
		zap.String("base", sreq.From), zap.String("peer", who(ctx)))
	r, err := s.store.Send(ctx, sreq)
	if err != nil {
		return s.storeError(ctx, err, zap.String("volume", string(sreq.Volume)))
	}
	defer r.Close() // stops zfs send if the peer went away
	log.Info("sending snapshot")
	start, sent := time.Now(), int64(0)
	pool := mem.DefaultBufferPool()
	for {
		// A pooled buffer per message; gRPC returns it to the pool once
		// written (it owns what Marshal hands it).
		bp := pool.Get(ChunkSize)
		n, rerr := io.ReadFull(r, *bp)
		if n > 0 {
			*bp = (*bp)[:n]
			if err := stream.SendMsg(&chunk{out: mem.NewBuffer(bp, pool)}); err != nil {
				log.Info("peer stopped receiving", zap.Int64("bytes", sent), zap.Error(err))
				return err
			}
			sent += int64(n)
		} else {
			pool.Put(bp)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			log.Warn("snapshot stream failed", zap.Int64("bytes", sent), zap.Error(rerr))
			return s.storeError(ctx, rerr)
		}
	}
	took := time.Since(start)
	log.Info("snapshot sent", zap.Int64("bytes", sent), zap.Duration("took", took), zap.Float64("MBps", mbps(sent, took)))
	return nil
}

// validToken accepts what `zfs get receive_resume_token` prints: digits,
// lower-case hex and dashes, bounded in length ("" means no token).
func validToken(t string) bool {
	if len(t) > 8192 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'f') && c != '-' {
			return false
		}
	}
	return true
}

func mbps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}

// who names the peer: the node its certificate names, else its subject,
// else its address.
func who(ctx context.Context) string {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return "unknown"
	}
	if n, ok := nodeOfAuth(p.AuthInfo); ok {
		return "node " + string(n) + "@" + p.Addr.String()
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		return ti.State.PeerCertificates[0].Subject.CommonName + " (no node named)@" + p.Addr.String()
	}
	return p.Addr.String()
}

// nodeName is a Kubernetes node name (a DNS subdomain).
var nodeName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Source is what the peer server serves from the node's pool: listings
// and send streams (ports.SnapshotStore keeps them).
type Source interface {
	ListSnapshots(ctx context.Context, id volume.ID) ([]ports.SnapshotInfo, error)
	Send(ctx context.Context, req ports.SendRequest) (io.ReadCloser, error)
}
