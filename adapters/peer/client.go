package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Resolver returns the address (host:port) of a node's peer service.
type Resolver func(node replica.Node) (string, error)

// Client fetches snapshots from peers: a ports.Transport. It keeps one
// connection per peer address.
type Client struct {
	resolve Resolver
	creds   credentials.TransportCredentials
	speaks  versions // the peer protocol versions it asks in
	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
}

var _ ports.Transport = (*Client)(nil)

// NewClient returns a client; creds are its mutual TLS credentials
// (ClientTLS), nil meaning plaintext (tests, --insecure-peer only).
func NewClient(resolve Resolver, creds credentials.TransportCredentials) *Client {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return &Client{resolve: resolve, creds: creds, speaks: speaks, conns: map[string]*grpc.ClientConn{}}
}

// Close closes every connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for addr, cc := range c.conns {
		errs = append(errs, cc.Close())
		delete(c.conns, addr)
	}
	return errors.Join(errs...)
}

func (c *Client) conn(node replica.Node) (*grpc.ClientConn, error) {
	addr, err := c.resolve(node)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %v: %w", node, err, ports.ErrUnavailable)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := string(node) + "@" + addr // a connection checks the node it dials
	if cc, ok := c.conns[key]; ok {
		return cc, nil
	}
	creds := c.creds
	if r, ok := creds.(*reloading); ok {
		creds = r.forNode(node)
	}
	cc, err := grpc.NewClient(addr, append(clientVersioning(c.speaks), grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{})),
		grpc.WithInitialWindowSize(windowSize), grpc.WithInitialConnWindowSize(windowSize),
		grpc.WithWriteBufferSize(bufferSize), grpc.WithReadBufferSize(bufferSize),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}))...)
	if err != nil {
		return nil, fmt.Errorf("peer %s at %s: %v: %w", node, addr, err, ports.ErrUnavailable)
	}
	c.conns[key] = cc
	return cc, nil
}

// fromStatus maps a peer's gRPC status to the port's errors.
func fromStatus(node replica.Node, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var kind error
	switch st.Code() {
	case codes.NotFound:
		kind = ports.ErrNotFound
	case codes.PermissionDenied:
		kind = ports.ErrNotOwned
	case codes.InvalidArgument:
		kind = ports.ErrInvalid
	case codes.Unavailable, codes.DeadlineExceeded:
		kind = ports.ErrUnavailable
	case codes.Canceled:
		kind = context.Canceled
	case codes.FailedPrecondition:
		kind = ports.ErrIncompatible
	default:
		return fmt.Errorf("peer %s: %s", node, st.Message())
	}
	return fmt.Errorf("peer %s: %s: %w", node, st.Message(), kind)
}

// Snapshots lists the replication snapshots node holds of a volume.
func (c *Client) Snapshots(ctx context.Context, node replica.Node, id volume.ID) ([]ports.SnapshotInfo, error) {
	return c.list(ctx, node, id, false)
}

// CSISnapshots implements ports.SnapshotPeers: the CSI snapshots node
// holds of a volume (none from a peer of a release before them, which
// lists replication snapshots only: those are left out here).
func (c *Client) CSISnapshots(ctx context.Context, node replica.Node, id volume.ID) ([]ports.SnapshotInfo, error) {
	list, err := c.list(ctx, node, id, true)
	if err != nil {
		return nil, err
	}
	out := list[:0]
	for _, s := range list {
		if volume.IsSnapshotStoreName(s.Name) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (c *Client) list(ctx context.Context, node replica.Node, id volume.ID, csi bool) ([]ports.SnapshotInfo, error) {
	cc, err := c.conn(node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	var resp SnapshotsResponse
	if err := cc.Invoke(ctx, methodSnapshots, &SnapshotsRequest{Volume: string(id), CSI: csi}, &resp); err != nil {
		return nil, fromStatus(node, err)
	}
	out := make([]ports.SnapshotInfo, 0, len(resp.Snapshots))
	for _, s := range resp.Snapshots {
		out = append(out, ports.SnapshotInfo{Volume: id, Name: s.Name, GUID: s.GUID, CreateTxg: s.CreateTxg, SizeBytes: s.SizeBytes, Metadata: s.Metadata})
	}
	return out, nil
}

var sendStream = grpc.StreamDesc{StreamName: "Send", ServerStreams: true}

// Fetch opens node's stream of req. It waits for the first chunk, so a
// peer's refusal (NotFound, NotOwned) is Fetch's error, not the first
// Read's. Closing the stream cancels it, which kills the peer's zfs send.
func (c *Client) Fetch(ctx context.Context, node replica.Node, req ports.SendRequest) (io.ReadCloser, error) {
	cc, err := c.conn(node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := cc.NewStream(ctx, &sendStream, methodSend)
	if err != nil {
		cancel()
		return nil, fromStatus(node, err)
	}
	if err := stream.SendMsg(&SendRequest{Volume: string(req.Volume), From: req.From, To: req.To, ResumeToken: req.ResumeToken, Accept: featureNames(req.Accept)}); err != nil {
		cancel()
		return nil, fromStatus(node, err)
	}
	if err := stream.CloseSend(); err != nil {
		cancel()
		return nil, fromStatus(node, err)
	}
	r := &fetchReader{node: node, stream: stream, cancel: cancel, idle: time.AfterFunc(streamIdle, cancel)}
	if err := r.next(); err != nil && !errors.Is(err, io.EOF) {
		r.idle.Stop()
		cancel()
		return nil, err
	}
	return r, nil
}

type fetchReader struct {
	node   replica.Node
	stream grpc.ClientStream
	cancel context.CancelFunc
	idle   *time.Timer     // cancels a stream that delivers nothing for streamIdle
	bufs   mem.BufferSlice // the current message's buffers, not yet written
	off    int             // bytes of bufs[0] already written
	err    error
}

// release frees the buffers still held.
func (r *fetchReader) release() {
	for _, b := range r.bufs {
		b.Free()
	}
	r.bufs, r.off = nil, 0
}

func (r *fetchReader) next() error {
	r.release()
	var c chunk
	if err := r.stream.RecvMsg(&c); err != nil {
		if errors.Is(err, io.EOF) {
			r.err = io.EOF
		} else {
			r.err = fromStatus(r.node, err)
		}
		return r.err
	}
	r.bufs = c.in
	r.idle.Reset(streamIdle)
	return nil
}

// front returns the unwritten part of the current buffer, dropping
// buffers that are done; nil when the message is used up.
func (r *fetchReader) front() []byte {
	for len(r.bufs) > 0 {
		data := r.bufs[0].ReadOnlyData()[r.off:]
		if len(data) > 0 {
			return data
		}
		r.bufs[0].Free()
		r.bufs, r.off = r.bufs[1:], 0
	}
	return nil
}

// Read returns the stream's bytes; a stream that ended with an error
// returns that error, never io.EOF, so a cut stream is never mistaken for a
// complete one.
func (r *fetchReader) Read(p []byte) (int, error) {
	for {
		if data := r.front(); data != nil {
			n := copy(p, data)
			r.off += n
			return n, nil
		}
		if r.err != nil {
			return 0, r.err
		}
		if err := r.next(); err != nil {
			return 0, err
		}
	}
}

// WriteTo hands gRPC's buffers to w without an intermediate copy (io.Copy
// uses it).
func (r *fetchReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if data := r.front(); data != nil {
			n, err := w.Write(data)
			total += int64(n)
			r.off += n
			if err != nil {
				return total, err
			}
			continue
		}
		if r.err != nil {
			if errors.Is(r.err, io.EOF) {
				return total, nil
			}
			return total, r.err
		}
		if err := r.next(); err != nil && !errors.Is(err, io.EOF) {
			return total, err
		}
	}
}

func (r *fetchReader) Close() error {
	r.idle.Stop()
	r.cancel()
	r.release()
	return nil
}

// Promise asks the peer on node not to take asker's volumes over: granted,
// for span from when the request was sent (measured by the caller).
func (c *Client) Promise(ctx context.Context, node, asker replica.Node) (bool, time.Duration, error) {
	cc, err := c.conn(node)
	if err != nil {
		return false, 0, err
	}
	var resp PromiseResponse
	if err := cc.Invoke(ctx, methodPromise, &PromiseRequest{Node: string(asker)}, &resp); err != nil {
		return false, 0, fromStatus(node, err)
	}
	// The connection refused a server naming another node than the one
	// asked (and, where node identities are required, one naming none).
	if !resp.Granted || resp.Span <= 0 {
		return false, 0, nil
	}
	return true, time.Duration(resp.Span), nil
}
